"""What a model's profile may pass to an engine: an allow list of flags and environment, per engine.

A profile's `args` and `env` are the operator's way to tune an engine, and
they reach a process on every node the model is placed on. Some of what an
engine accepts is not tuning but a way to run other code in it, or to read
and write files it was not given: vLLM's `--trust-remote-code`,
llama.cpp's `--log-file`, a CUDA injection library. So each engine plugin
says which flags and variables it takes from a profile, and everything else
is refused, with the reason when llmgw knows one. The check runs where a
model is defined (`llmgw config check`, `llmgw ctl model add`) and again in
the agent before it starts the engine.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

import attrs

__all__ = ["ALWAYS_REFUSED_FLAGS", "ArgPolicy", "COMMON_ENV", "flag_name", "flag_table", "refused_env_reason"]

#: Why a variable whose name holds one of these words is refused, whatever its family.
_ENV_NEVER: tuple[tuple[str, str], ...] = (
    ("INJECTION", "loads a library into the engine"),
    ("PRELOAD", "loads a library into the engine"),
    ("PLUGIN", "loads a plugin (code) into the engine"),
    ("LIBRARY", "loads a library into the engine"),
    ("_LIB", "loads a library into the engine"),
    ("_PATH", "names a file or folder the engine would read or write"),
    ("_DIR", "names a file or folder the engine would read or write"),
    ("_HOME", "names a file or folder the engine would read or write"),
    ("_FILE", "names a file or folder the engine would read or write"),
    ("_ROOT", "names a file or folder the engine would read or write"),
    ("_CACHE", "names a file or folder the engine would read or write"),
    ("_CONFIG", "names a file or folder the engine would read or write"),
    ("_ADDRESS", "sends the engine's traffic somewhere else"),
    ("_ENDPOINT", "sends the engine's traffic somewhere else"),
    ("_URL", "sends the engine's traffic somewhere else"),
    ("_HOST", "sends the engine's traffic somewhere else"),
    ("_TOKEN", "is a credential; an engine gets only its own key, from llmgw"),
    ("_KEY", "is a credential; an engine gets only its own key, from llmgw"),
    ("SECRET", "is a credential; an engine gets only its own key, from llmgw"),
    ("PASSWORD", "is a credential; an engine gets only its own key, from llmgw"),
)

#: Whole families refused by name, with the reason.
_ENV_REFUSED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LD_", "changes what the dynamic loader loads"),
    ("DYLD_", "changes what the dynamic loader loads"),
    ("PYTHON", "changes what Python imports or runs at start"),
    ("LLMGW_", "is llmgw's own"),
)
_ENV_REFUSED_EXACT: Mapping[str, str] = {
    "PATH": "changes which programs run",
    "BASH_ENV": "makes a shell run a file",
    "ENV": "makes a shell run a file",
    "PERL5OPT": "makes Perl load code",
    "PERL5LIB": "makes Perl load code",
    "NODE_OPTIONS": "makes Node load code",
    "GCONV_PATH": "loads a library into the engine",
    "OPENSSL_CONF": "makes OpenSSL load a file and its modules",
    "HOME": "moves where the engine reads and writes; llmgw sets it",
    "CUDA_VISIBLE_DEVICES": "is set by llmgw from the GPUs the shard was given",
    "CUDA_DEVICE_ORDER": "is set by llmgw so cards are numbered as nvidia-smi numbers them",
}

#: Flags refused for every engine, whether or not it has them, with the reason.
ALWAYS_REFUSED_FLAGS: Mapping[str, str] = {
    "--trust-remote-code": "runs code from the model's repository",
    "--trust_remote_code": "runs code from the model's repository",
}

#: Variables every engine is tuned with: CUDA's, NCCL's and OpenMP's.
COMMON_ENV: tuple[str, ...] = ("CUDA_*", "NCCL_*", "OMP_*", "TZ")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def flag_name(arg: str) -> str:
    """`--ctx-size=4096` -> `--ctx-size`."""
    return arg.split("=", 1)[0]


def flag_table(text: str) -> dict[str, bool]:
    """`"--ctx-size= -c= --mlock"` -> {"--ctx-size": True, "-c": True, "--mlock": False}: `=` marks a value."""
    return {word.rstrip("="): word.endswith("=") for word in text.split()}


def refused_env_reason(name: str) -> str | None:
    """Why `name` may never be given to an engine by a profile, or None when nothing forbids it outright."""
    key = name.upper()
    if key in _ENV_REFUSED_EXACT:
        return _ENV_REFUSED_EXACT[key]
    for prefix, why in _ENV_REFUSED_PREFIXES:
        if key.startswith(prefix) and key not in ("PYTHONUNBUFFERED", "PYTHONHASHSEED"):
            return why
    for word, why in _ENV_NEVER:
        if word in key:
            return why
    return None


def _matches(name: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern.endswith("*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False


@attrs.frozen
class ArgPolicy:
    """One engine's allow list: the flags and variables a profile may give it.

    `flags` maps each allowed flag (every spelling) to whether it takes a
    value; `managed` are the flags llmgw sets for each replica; `refused`
    gives the reason for flags llmgw knows to be unsafe (any other flag is
    refused as not on the list). `env` are allowed variable names, `NAME`
    or a family `PREFIX_*`; `env_managed` are the ones the plugin sets.
    """

    engine: str
    flags: Mapping[str, bool] = attrs.Factory(dict)
    managed: Sequence[str] = ()
    refused: Mapping[str, str] = attrs.Factory(dict)
    env: Sequence[str] = COMMON_ENV
    env_managed: Sequence[str] = ()
    #: Some engines read flags from variables too (llama.cpp's LLAMA_ARG_CTX_SIZE): prefix -> how to spell the flag.
    env_flags_prefix: str = ""

    def problems(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """Every reason the profile's `args` and `env` may not reach this engine; empty when they may."""
        return self.arg_problems(args) + self.env_problems(env)

    def arg_problems(self, args: Sequence[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(args):
            arg = str(args[i])
            name = flag_name(arg)
            if not name.startswith("-"):
                out.append(f"args[{i}]: {arg!r} is not a flag, nor the value of the flag before it; "
                           f"write flags as --name value or --name=value")
                i += 1
                continue
            why = self.flag_refusal(name)
            if why:
                out.append(f"args[{i}]: {why}")
                if "=" not in arg and i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
                    i += 1  # its value, most likely: one refusal says enough
            elif self.flags[name] and "=" not in arg:
                if i + 1 >= len(args):
                    out.append(f"args[{i}]: {name} takes a value, and none follows it")
                i += 1  # its value
            elif not self.flags[name] and "=" in arg:
                out.append(f"args[{i}]: {name} takes no value; write it alone")
            i += 1
        return out

    def flag_refusal(self, name: str) -> str | None:
        """Why flag `name` may not be given by a profile, or None when it is on the allow list."""
        why = self.refused.get(name) or ALWAYS_REFUSED_FLAGS.get(name)
        if why:
            return f"{name} {why}: not allowed"
        if name in self.managed:
            return f"{name} is set by llmgw for each replica; remove it"
        if name not in self.flags:
            return f"{name} is not on the {self.engine} engine's allow list (docs/engines.md has it): not allowed"
        return None

    def env_problems(self, env: Mapping[str, str]) -> list[str]:
        out: list[str] = []
        for name in env:
            why = self.env_refusal(str(name))
            if why:
                out.append(f"env.{name}: {why}")
        return out

    def env_refusal(self, name: str) -> str | None:
        """Why variable `name` may not be given by a profile, or None when it is allowed."""
        if not _ENV_NAME.fullmatch(name):
            return f"{name} is not a variable name (letters, digits and _)"
        key = name.upper()
        if _matches(key, self.env_managed):
            return f"{name} is set by llmgw for each replica; remove it"
        if self.env_flags_prefix and key.startswith(self.env_flags_prefix):
            flag = "--" + key[len(self.env_flags_prefix):].lower().replace("_", "-")
            refusal = self.flag_refusal(flag)
            return f"{name} is the flag {flag}, and {refusal}" if refusal else None
        why = refused_env_reason(key)
        if why:
            return f"{name} {why}: not allowed"
        if not _matches(key, self.env):
            return (f"{name} is not among the variables the {self.engine} engine is tuned with "
                    f"({', '.join(self.env)}); not allowed")
        return None

    def described(self) -> dict[str, object]:
        """The allow list as data (for docs and `llmgw plugins --json`)."""
        return {"flags": sorted(self.flags), "managed": sorted(self.managed), "refused": dict(self.refused),
                "env": list(self.env), "env_managed": list(self.env_managed)}


def allow_lists_markdown(engines: Mapping[str, object]) -> str:
    """The allow list of every engine, as docs/engines.md shows it between its `allow-lists` markers."""
    out = []
    for name in sorted(engines):
        policy = getattr(engines[name], "arguments", None)
        if not isinstance(policy, ArgPolicy):
            continue
        flags = ", ".join(f"`{f}{' V' if policy.flags[f] else ''}`" for f in sorted(policy.flags))
        out += [f"**{name}**", "",
                f"- flags (V: takes a value): {flags}",
                f"- set by llmgw: {', '.join(f'`{f}`' for f in policy.managed)}",
                f"- environment: {', '.join(f'`{e}`' for e in policy.env)}"
                + (f"; `{policy.env_flags_prefix}*` as the flag it spells" if policy.env_flags_prefix else ""),
                f"- environment set by llmgw: {', '.join(f'`{e}`' for e in policy.env_managed) or 'none'}"]
        if policy.refused:
            out.append("- refused, with the reason:")
            out += [f"  - `{flag}` {why}" for flag, why in sorted(policy.refused.items())]
        out.append("")
    return "\n".join(out)
