"""A simulated prefix cache: block hashes in a least-recently-used map.

As in vLLM, a prompt's tokens are cut into blocks of `block_size`; only full
blocks are cached; each block's hash covers its parent's hash and its own
tokens, so a block hits only when everything before it hit too. The hashes
are Python's own (fast, but different in every process): they never leave
the engine.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Which prompt prefixes the engine holds, in blocks, up to `capacity` blocks."""

    def __init__(self, block_size: int, capacity: int, *, enabled: bool = True) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.enabled = enabled
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def block_hashes(self, tokens: Sequence[str], root: int = 0) -> list[int]:
        """Chained hashes of the prompt's full blocks, first block first.

        `root` separates what must not share blocks (vLLM keys blocks by
        model and adapter too).
        """
        size = self.block_size
        hashes = []
        parent = root
        for end in range(size, len(tokens) + 1, size):
            parent = hash((parent, *tokens[end - size : end]))
            hashes.append(parent)
        return hashes

    def match(self, hashes: Sequence[int], prompt_len: int) -> int:
        """How many leading prompt tokens are cached; the blocks that hit are
        marked recently used.

        At least the last prompt token is always computed, as in vLLM: a prompt
        of exactly two full blocks, both cached, hits one block.
        """
        if not self.enabled:
            return 0
        usable = (prompt_len - 1) // self.block_size
        blocks = self._blocks
        hit = 0
        for h in hashes[:usable]:
            if h not in blocks:
                break
            blocks.move_to_end(h)
            hit += 1
        return hit * self.block_size

    def insert(self, hashes: Sequence[int]) -> None:
        """Record the prompt's blocks as cached, evicting the least recently used."""
        if not self.enabled:
            return
        blocks = self._blocks
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
