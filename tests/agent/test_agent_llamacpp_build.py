"""The llama-server builder, with cmake and the compiler replaced by scripts (the real build is CI's slow job)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from llmgw.agent import llamacpp_build as lb


def llama_tree(root: Path, marker: str = "one") -> Path:
    """A directory shaped like llama.cpp's source, small."""
    (root / "include").mkdir(parents=True)
    (root / "ggml").mkdir()
    (root / "models").mkdir()
    (root / "CMakeLists.txt").write_text(f"project(llama.cpp) # {marker}\n")
    (root / "include" / "llama.h").write_text("// llama\n")
    (root / "models" / "ggml-vocab-llama-spm.gguf").write_bytes(b"GGUF vocab")
    return root


def sdist(tmp: Path, marker: str = "one") -> Path:
    """A llama-cpp-python sdist: its own CMakeLists.txt, llama.cpp under vendor/."""
    top = tmp / "llama_cpp_python-9.9.9"
    (top / "examples" / "server").mkdir(parents=True)  # the Python package's examples: not llama.cpp's
    (top / "CMakeLists.txt").write_text("project(llama_cpp)\n")
    llama_tree(top / "vendor" / "llama.cpp", marker)
    tarball = tmp / "llama_cpp_python-9.9.9.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return tarball


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """`cmake` that records its calls and 'builds' a llama-server script; a `c++` that is there."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    calls = tmp_path / "cmake-calls"
    (bin_dir / "cmake").write_text(f"""#!/bin/sh
echo "$@" >> {calls}
if [ "$1" = "-S" ]; then mkdir -p "$4"; exit 0; fi
if [ "$1" = "--build" ]; then
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\necho "version: 4242 (fake)" >&2\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
fi
""")
    (bin_dir / "c++").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("cmake", "c++"):
        os.chmod(bin_dir / tool, 0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def test_the_llama_tree_is_found_in_a_tree_or_under_vendor(tmp_path):
    tree = llama_tree(tmp_path / "llama.cpp")
    assert lb.llama_root(tree) == tree
    top = tmp_path / "sdist"
    (top / "examples" / "server").mkdir(parents=True)
    (top / "CMakeLists.txt").write_text("x")
    llama_tree(top / "vendor" / "llama.cpp")
    assert lb.llama_root(top) == top / "vendor" / "llama.cpp"
    with pytest.raises(lb.BuildError, match="neither a llama.cpp source tree nor a llama-cpp-python sdist"):
        lb.llama_root(tmp_path / "sdist" / "examples")


def test_the_cache_key_follows_the_source_and_the_flags(tmp_path):
    a = llama_tree(tmp_path / "a", "one")
    b = llama_tree(tmp_path / "b", "two")
    assert lb.source_key(a) == lb.source_key(a)
    assert lb.source_key(a) != lb.source_key(b)
    assert lb.source_key(a) != lb.source_key(a, [*lb.CMAKE_FLAGS, "-DGGML_CUDA=ON"])


def test_an_sdist_is_built_once_and_kept_with_its_vocabulary(tmp_path, fake_tools, capsys):
    tarball = sdist(tmp_path)
    cache = tmp_path / "cache"
    binary = lb.build_llama_server(tarball, cache=cache, quiet=True)
    assert binary == cache / lb.source_key(tarball.resolve()) / "llama-server"
    assert os.access(binary, os.X_OK)
    assert (binary.parent / "vocab" / "ggml-vocab-llama-spm.gguf").read_bytes() == b"GGUF vocab"
    assert "4242" in (binary.parent / "build.json").read_text()
    calls = fake_tools.read_text().splitlines()
    assert len(calls) == 2
    assert calls[0].startswith("-S ") and "/vendor/llama.cpp -B " in calls[0]
    assert all(flag in calls[0] for flag in lb.CMAKE_FLAGS)
    assert "--target llama-server -j " in calls[1]

    assert lb.main(["--sdist", str(tarball), "--cache", str(cache)]) == 0
    assert capsys.readouterr().out.strip() == str(binary)
    assert len(fake_tools.read_text().splitlines()) == 2  # cached: not built again
    assert lb.find_cached(cache) == binary
    assert lb.find_vocab(cache=cache) == binary.parent / "vocab" / "ggml-vocab-llama-spm.gguf"


def test_a_source_tree_builds_too(tmp_path, fake_tools):
    tree = llama_tree(tmp_path / "llama.cpp")
    binary = lb.build_llama_server(tree, cache=tmp_path / "cache", jobs=1, quiet=True)
    assert binary.is_file()
    assert "-j 1" in fake_tools.read_text().splitlines()[1]


def test_missing_tools_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(lb.BuildError, match="cmake is not installed"):
        lb.build_llama_server(llama_tree(tmp_path / "t"), cache=tmp_path / "c")


def test_the_cache_dir_can_be_moved_by_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_LLAMA_CPP_CACHE", str(tmp_path / "elsewhere"))
    assert lb.default_cache_dir() == tmp_path / "elsewhere"
    assert lb.find_cached() is None


def test_pypi_builds_of_a_pinned_release_are_found_without_downloading(tmp_path, fake_tools, monkeypatch, capsys):
    tarball = sdist(tmp_path)
    cache = tmp_path / "cache"

    def download(dest: Path, version: str | None) -> Path:
        assert version == lb.PYPI_VERSION
        return tarball

    monkeypatch.setattr(lb, "download_sdist", download)
    assert lb.main(["--pypi", "--cache", str(cache)]) == 0
    built = capsys.readouterr().out.strip()
    assert (cache / f"pypi-{lb.PYPI_VERSION}.key").read_text() == Path(built).parent.name

    def no_download(dest: Path, version: str | None) -> Path:
        raise AssertionError("a cached pinned release was downloaded again")

    monkeypatch.setattr(lb, "download_sdist", no_download)
    assert lb.main(["--pypi", "--cache", str(cache)]) == 0
    assert capsys.readouterr().out.strip() == built
