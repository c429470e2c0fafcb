"""Do → Back up now: what goes into an archive and where, the archives kept, and making one (asked first)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from console_screen import keys, open_view, screen


async def test_back_up_now_explains_asks_and_shows_the_archive(app, live):
    folder = f"{live.folder}/backups"
    await open_view(app, "Back up now")
    text = screen(app)
    for words in ("the store, copied consistently while the cluster keeps serving",
                  "(SQLite's online backup, or pg_dump for PostgreSQL)",
                  "the folder server.yaml is in (server.yaml, certificates, keys)",
                  "and the files it names outside it, like the admin token",
                  "manifest.json: llmgw's version, the schema version, each file's sha256.",
                  f"Folder: {folder}", "Kept:   the newest 7; older ones are removed",
                  "Copy archives off this machine", "Recent archives", "none yet",
                  "Enter backs up now, after asking; from a shell, sudo llmgw server backup."):
        assert words in text, words

    # Any key but Y leaves it.
    await keys(app, "enter")
    assert "Back up the store and the configuration now?" in screen(app)
    assert f"into {folder}" in screen(app)
    await keys(app, "n")
    assert not app.dialogs and not os.path.exists(folder)
    assert "Nothing was done." in screen(app)

    await keys(app, "enter", "y")
    dialog = screen(app)
    assert "Backed up" in dialog
    [name] = [n for n in os.listdir(folder) if n.endswith(".tar.gz")]
    path = os.path.join(folder, name)
    sha256 = Path(path + ".sha256").read_text().split()[0]
    assert f"sha256  {sha256}" in dialog  # (its path, long here, wraps in the dialog)
    assert f"({os.path.getsize(path)} bytes)" in dialog
    assert "holds   the sqlite store (schema version" in dialog
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

    await keys(app, "enter")  # closes the dialog
    await app.model.refresh_now("backups")
    app.view.refresh()
    text = screen(app)
    assert "none yet" not in text and f"  {name}  " in text


async def test_a_refusal_is_shown_word_for_word(app, live, tmp_path):
    # A file where the folder would be: the control plane cannot make it, and says so.
    (tmp_path / "backups").write_text("in the way")
    await open_view(app, "Back up now")
    await keys(app, "enter", "y")
    text = screen(app)
    # The dialog's lines, joined: where the long path makes the message wrap depends on the path.
    said = " ".join(line.split("│")[1].strip() for line in text.splitlines() if line.count("│") >= 2)
    assert "Refused" in text and "the backup failed:" in said and "is a file, not a folder" in said
