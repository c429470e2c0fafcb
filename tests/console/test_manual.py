"""The manual in the console: pages, scrolling, contents (T), find (/, n, N), the page before and after."""

from __future__ import annotations

from console_screen import keys, open_view, screen, type_in

from llmgw.console.model.manual import page_named
from llmgw.manual import pages


def focused_line(view) -> str:
    return view.page.lines[view.line]


async def test_every_page_is_listed_and_enter_reads_one(app):
    view = await open_view(app, "Manual")
    text = screen(app)
    for page in pages().values():
        assert f"{page.name}" in text or len(pages()) > 30
    assert view.list.focused.key == "index"
    await keys(app, "enter")
    assert view.page is not None and view.page.name == "index"
    assert "The llmgw manual (index)" in screen(app)
    bottom = screen(app).splitlines()[-1]
    assert "T contents" in bottom and "/ find" in bottom and "n/N next/before" in bottom
    await keys(app, "left")
    assert view.page is None and app.in_panel
    await keys(app, "left")
    assert not app.in_panel


async def test_find_marks_the_lines_and_n_and_shift_n_go_through_them(app):
    await keys(app, "?")
    view = app.view
    assert view.page.name == "console"
    expected = [i for i, line in enumerate(view.page.lines) if "drain" in line.lower()]
    assert len(expected) >= 3
    await keys(app, "/")
    assert "Find" in screen(app)
    await type_in(app, "DRAIN")
    await keys(app, "enter")
    assert not app.dialogs
    text = screen(app)
    assert f"{len(expected)} lines hold 'DRAIN'; n the next, N the one before." in text
    assert f"· {len(expected)} lines hold 'DRAIN'" in text
    assert view.line == expected[0] and "drain" in focused_line(view).lower()
    await keys(app, "n")
    assert view.line == expected[1]
    assert f"match 2 of {len(expected)}" in screen(app).splitlines()[-2]
    await keys(app, "N", "N")
    assert view.line == expected[-1]  # going round
    await keys(app, "n")
    assert view.line == expected[0]

    await keys(app, "/")
    await type_in(app, "no such words anywhere")
    await keys(app, "enter")
    assert "No line holds 'no such words anywhere'." in screen(app)


async def test_contents_goes_to_a_heading_and_g_goes_to_the_ends(app):
    await keys(app, "?")
    view = app.view
    await keys(app, "T")
    text = screen(app)
    assert "Contents of console" in text and "The layout" in text and "Forms and questions" in text
    headings = page_named("console").headings
    index = next(i for i, (_, _, title) in enumerate(headings) if title == "Forms and questions")
    await keys(app, *["down"] * index, "enter")
    assert focused_line(view) == "## Forms and questions"
    assert screen(app).splitlines()[3][25:].startswith("## Forms and questions")  # at the top of the panel
    await keys(app, "G")
    assert view.line == len(view.page.lines) - 1
    await keys(app, "g")
    assert view.line == 0
    await keys(app, " ")  # Space scrolls a screen
    await keys(app, "page down")


async def test_brackets_turn_to_the_page_before_and_after(app):
    names = list(pages())
    await keys(app, "?")
    view = app.view
    i = names.index("console")
    await keys(app, "]")
    assert view.page.name == names[i + 1]
    await keys(app, "[", "[")
    assert view.page.name == names[i - 1]
