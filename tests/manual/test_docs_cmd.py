"""`llmgw docs`: every page of docs/ listed and shown."""

import json
from pathlib import Path

from llmgw.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_lists_every_page_with_its_title(capsys):
    assert main(["docs", "--json"]) == 0
    listed = {p["page"]: p["title"] for p in json.loads(capsys.readouterr().out)}
    assert set(listed) == {p.stem for p in DOCS.glob("*.md")}
    assert listed["reference"]


def test_shows_a_page_plain_when_piped(capsys):
    assert main(["docs", "configuration"]) == 0
    assert capsys.readouterr().out == (DOCS / "configuration.md").read_text()


def test_a_near_miss_names_the_closest_page(capsys):
    assert main(["docs", "configuraton"]) == 2
    err = capsys.readouterr().err
    assert "configuraton" in err and "configuration" in err


def test_the_index_links_every_page_and_only_pages_that_exist():
    import re

    index = (DOCS / "index.md").read_text()
    linked = set(re.findall(r"\]\(([a-z0-9-]+)\.md\)", index))
    pages = {p.stem for p in DOCS.glob("*.md")} - {"index"}
    assert linked - pages == set(), "index.md links pages that do not exist"
    assert pages - linked == set(), "pages missing from index.md"
