"""build.py's split of what it installed: pure distributions every Python has alike once, the rest per Python."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("llmgw_build", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(stage: Path, name: str, version: str, tag: str, files: dict[str, str]) -> None:
    meta = stage / f"{name}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: {'true' if 'any' in tag else 'false'}\n"
                                f"Tag: {tag}\n")
    for path, text in files.items():
        (stage / path).parent.mkdir(parents=True, exist_ok=True)
        (stage / path).write_text(text)
    record = [f"{p},," for p in files] + [f"{meta.name}/WHEEL,,", f"{meta.name}/RECORD,,", "../../bin/tool,,"]
    (meta / "RECORD").write_text("\n".join(record) + "\n")


def test_pure_distributions_go_once_and_compiled_or_version_only_ones_per_python(build, tmp_path):
    stages = {}
    for py in ("3.10", "3.11"):
        tag = "cp" + py.replace(".", "")
        stage = stages[py] = tmp_path / tag
        install(stage, "jinja2", "3.1.6", "py3-none-any", {"jinja2/__init__.py": "pure"})
        install(stage, "numpy", "2.2.6" if py == "3.10" else "2.4.6", f"{tag}-{tag}-manylinux_2_28_x86_64",
                {f"numpy/core.{tag}.so": "compiled"})
        if py == "3.10":
            install(stage, "async_timeout", "5.0.1", "py3-none-any", {"async_timeout/__init__.py": "backport"})
    parts = build._split(stages)
    names = {part: sorted(arc for _, arc in files) for part, files in parts.items()}
    assert names["common"] == ["jinja2-3.1.6.dist-info/RECORD", "jinja2-3.1.6.dist-info/WHEEL", "jinja2/__init__.py"]
    assert "async_timeout/__init__.py" in names["cp310"] and "numpy/core.cp310.so" in names["cp310"]
    assert "numpy/core.cp311.so" in names["cp311"] and not any("async_timeout" in n for n in names["cp311"])
    assert not any(n.startswith("jinja2") for n in names["cp310"] + names["cp311"])


def test_the_build_refuses_an_arch_it_does_not_make(build, capsys):
    assert build.main(["--arch", "sparc"]) == 2
    assert "x86_64 or aarch64" in capsys.readouterr().err
