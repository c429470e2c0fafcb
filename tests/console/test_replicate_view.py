"""Do → Replicate the store: the form of `llmgw server init --patroni`, checked field by field by the same code,
a mistake said under its field with nothing written; a good one writes the same files as the command and says,
per machine, what to copy and run, and the store's address. (test_do_tmux.py does it in a terminal.)"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from console_screen import keys, open_view, screen, type_in

from llmgw.cli.main import main
from llmgw.pki import init_ca

MEMBERS = "db1=10.0.0.149,db2=10.0.0.150"
ETCD = "db1=10.0.0.149,db2=10.0.0.150,ctl=10.0.0.140"
#: A screen wide enough that the long temporary paths are not wrapped.
WIDE = (300, 60)


@pytest.fixture
def ca(tmp_path) -> Path:
    init_ca(tmp_path / "ca")
    return tmp_path / "ca"


@pytest.fixture
def bins(tmp_path) -> Path:
    folder = tmp_path / "pg" / "16" / "bin"
    folder.mkdir(parents=True)
    for name in ("initdb", "pg_ctl", "psql"):
        (folder / name).write_text("")
    return folder


async def fill(app, *, members: str, etcd: str, out: Path, ca: Path, bins: Path) -> None:
    """Open the form from the view and type each field, as an operator would (Tab between them)."""
    await open_view(app, "Replicate the store")
    await keys(app, "enter")
    assert "Replicate the store" in screen(app) and "NAME=HOST[:PG_PORT[:API_PORT]]" in screen(app)
    form = app.dialogs[-1]
    for value in (members, etcd, out, ca, None, bins, None):  # None: the field's default
        if isinstance(value, str):
            await type_in(app, value)
        elif value is not None:  # a long temporary path: put in whole (typing it is test_do_tmux.py's)
            form.fields[form.stop].set_text(str(value))
        await keys(app, "tab")


def tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in sorted(folder.rglob("*"))}


def said(text: str) -> str:
    """The dialog's lines joined: a long path wraps where the dialog's width puts it."""
    return " ".join(" ".join(line.split("│")[1].split()) for line in text.splitlines() if line.count("│") >= 2)


async def test_a_single_member_is_refused_under_its_field_and_nothing_is_written(app, tmp_path, ca, bins):
    out = tmp_path / "out"
    await fill(app, members="db1=10.0.0.149", etcd="", out=out, ca=ca, bins=bins)
    await keys(app, "enter")
    text = screen(app)
    assert "--members: give two or more PostgreSQL members" in said(text)
    form = app.dialogs[-1]
    assert form.errors["members"].said.startswith("--members: give two or more")
    assert not out.exists()


async def test_a_bad_member_name_and_an_even_etcd_are_each_said_under_their_field(app, tmp_path, ca, bins):
    out = tmp_path / "out"
    await fill(app, members="db 1=10.0.0.149,db2=10.0.0.150", etcd="", out=out, ca=ca, bins=bins)
    await keys(app, "enter")
    form = app.dialogs[-1]
    assert "--members: member name 'db 1' is not allowed" in form.errors["members"].said
    # Put right, the members pass; two etcd members cannot outvote a split: said under etcd, by plan's check.
    await keys(app, "tab", "tab")  # from Write, past Cancel, round to the first field
    await type_in(app, MEMBERS)
    await keys(app, "tab")
    await type_in(app, "e1=10.0.0.1,e2=10.0.0.2")
    await keys(app, *["tab"] * 6, "enter")  # down to Write
    assert form.errors["members"].said == ""
    assert form.errors["etcd"].said.startswith("--etcd: 2 etcd members cannot outvote a split into halves")
    assert "nothing was written" in form.errors["etcd"].said
    assert not out.exists() and app.dialogs[-1] is form


async def test_a_folder_that_holds_files_is_refused_naming_it(app, tmp_path, ca, bins):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("mine")
    await fill(app, members=MEMBERS, etcd=ETCD, out=out, ca=ca, bins=bins)
    await keys(app, "enter")
    assert app.dialogs[-1].errors["out"].said.startswith(f"--out: {out} already holds files")
    assert sorted(os.listdir(out)) == ["keep"]


async def test_a_good_form_writes_what_server_init_patroni_writes_and_says_what_to_run(app, tmp_path, ca, bins,
                                                                                      capsys):
    assert main(["server", "init", "--patroni", "--members", MEMBERS, "--etcd", ETCD, "--out",
                 str(tmp_path / "cli"), "--ca", str(ca), "--pg-bin", str(bins)]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "console"
    await fill(app, members=MEMBERS, etcd=ETCD, out=out, ca=ca, bins=bins)
    await keys(app, "enter")
    text = screen(app, WIDE)
    assert "The store's files are written" in text
    shown = said(text)
    for name, host in (("ctl", "10.0.0.140"), ("db1", "10.0.0.149"), ("db2", "10.0.0.150")):
        assert f"{out / name}/ for {host}:" in shown
    assert "copy it there and run `sudo sh install.sh` in it" in shown
    dsn = (out / "store-dsn").read_text().strip()
    password = dsn.split(":", 2)[2].split("@")[0]
    assert password not in text and dsn.replace(password, "***") in shown

    # The same files, modes and configuration as the command wrote; only secrets and certificates differ.
    assert tree(out) == tree(tmp_path / "cli")
    for rel in ("db1/patroni/patroni.yml", "db1/install.sh", "ctl/install.sh", "db2/llmgw-patroni.service",
                "ctl/llmgw-etcd.service", "db1/patroni/post-bootstrap.sh"):
        assert (out / rel).read_text() == (tmp_path / "cli" / rel).read_text(), rel
    # And the same words the command printed, its folder for the console's.
    lines = [line.replace(str(tmp_path / "cli"), str(out)) for line in printed.splitlines()]
    await keys(app, "enter")  # the dialog closes; the panel keeps what to do
    panel = " ".join(line[25:].strip() for line in screen(app, WIDE).splitlines())
    for line in lines:
        if "store-dsn  " not in line and "postgresql://" not in line:
            assert " ".join(line.split()) in " ".join(panel.split()), line
