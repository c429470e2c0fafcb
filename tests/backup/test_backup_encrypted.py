"""Encrypted archives: unreadable without their key, restored with it, refused whole when damaged; the drill."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import attrs
import pyrage
import pytest

from llmgw.backup.archive import BackupError, verify, write_archive
from llmgw.backup.seal import Opener
from llmgw.config import ConfigError, load_server_config

from .conftest import lay_out
from .test_backup_cli import check, run, seeded_machine


def add_backup_keys(machine, text: str) -> None:
    """More keys under backup: (the last section of lay_out's server.yaml)."""
    with open(machine.config_path, "a", encoding="utf-8") as f:
        f.write("".join(f"  {line}\n" for line in text.strip().splitlines()))


def new_key(folder: Path) -> tuple[Path, str]:
    identity = pyrage.x25519.Identity.generate()
    path = folder / "backup-key.txt"
    path.write_text(f"# a test key\n{identity}\n")
    return path, str(identity.to_public())


def tree_state(root: Path) -> dict[str, str]:
    """Every file under `root` with its sha256: what 'nothing was touched' is checked against."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def sealed(tmp_path, capsys):
    """A seeded machine whose server.yaml encrypts to a key kept elsewhere, and one archive made by it."""
    machine, seeded = seeded_machine(tmp_path)
    key, recipient = new_key(tmp_path)
    add_backup_keys(machine, f"encrypt_to: [{recipient}]")
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    return machine, seeded, key, out.splitlines()[0], out


def test_an_encrypted_archive_holds_nothing_in_clear(sealed):
    machine, seeded, key, archive, out = sealed
    assert archive.endswith(".tar.gz.age") and os.stat(archive).st_mode & 0o777 == 0o600
    assert "  checked  read back and decrypted; every file matches its manifest" in out.splitlines()
    assert "not encrypted" not in out
    raw = Path(archive).read_bytes()
    assert raw.startswith(b"age-encryption.org/v1\n")
    token = machine.token.read_text().strip().encode()
    for secret in (token, seeded.key_hash.encode(), b"PRIVATE KEY", b"acme", b"manifest.json"):
        assert secret not in raw
    with pytest.raises(gzip.BadGzipFile):
        gzip.decompress(raw)
    # The sidecar is the ciphertext's sha256, so `sha256sum -c` checks a copy anywhere.
    assert Path(archive + ".sha256").read_text().split()[0] == hashlib.sha256(raw).hexdigest()
    # With the key it is all there.
    plain = pyrage.decrypt(raw, [pyrage.x25519.Identity.from_str(key.read_text().splitlines()[1])])
    assert token in gzip.decompress(plain)


def test_an_encrypted_archive_cannot_be_read_without_its_key(sealed, tmp_path, capsys):
    machine, _, _, archive, _ = sealed
    with pytest.raises(BackupError, match="is encrypted; give the private key with --identity FILE"):
        verify(archive)
    other, _ = new_key(tmp_path / "cp1")
    with pytest.raises(BackupError, match="none of the keys given opens it"):
        verify(archive, opener=Opener.from_files(str(other)))
    fresh = lay_out(tmp_path / "cp2")
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path), "--yes")
    assert code == 1 and out == "" and "is encrypted" in err and err.endswith("; nothing was changed")
    assert not fresh.db.exists()


def test_restore_from_an_encrypted_archive_with_its_key(sealed, tmp_path, capsys):
    _, seeded, key, archive, _ = sealed
    fresh = lay_out(tmp_path / "cp2")
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path),
                         "--identity", str(key), "--yes")
    assert code == 0, err
    assert f"store: {fresh.db} restored" in out.splitlines()
    check(fresh.store_dsn, seeded)


def test_a_damaged_encrypted_archive_is_refused_before_anything_is_touched(sealed, tmp_path, capsys):
    machine, _, key, archive, _ = sealed
    raw = bytearray(Path(archive).read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one bit of one byte, in the middle of the ciphertext
    damaged = tmp_path / "damaged.tar.gz.age"
    damaged.write_bytes(bytes(raw))
    before = tree_state(machine.root)
    code, out, err = run(capsys, "server", "restore", str(damaged), "--config", str(machine.config_path),
                         "--identity", str(key), "--yes", "--config-too")
    assert code == 1 and out == ""
    assert err.startswith(f"llmgw server restore: {damaged}: ") and err.endswith("; nothing was changed")
    assert "damaged" in err
    assert tree_state(machine.root) == before


def test_the_drill_restores_into_scratch_and_the_counts_match(sealed, capsys):
    machine, _, key, archive, _ = sealed
    before = tree_state(machine.root)
    code, out, err = run(capsys, "server", "backup", "drill", archive, "--identity", str(key))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Archive {archive}"
    # seed() wrote one organization, one project, one key and five usage rows
    rows = {line.split()[1]: line.split() for line in lines if line.startswith("  ok  ")}
    assert rows["orgs"][2] == "1" and rows["api_keys"][2] == "1" and rows["usage"][2] == "5"
    assert lines[-1].startswith("Drill passed: all ") and lines[-1].endswith(" tables have the rows the manifest "
                                                                              "counted.")
    assert tree_state(machine.root) == before  # the machine's own store and configuration untouched
    code, out, _ = run(capsys, "server", "backup", "drill", archive, "--identity", str(key), "--json")
    answer = json.loads(out)
    assert code == 0 and answer["ok"] is True
    assert {"table": "usage", "expected": 5, "found": 5, "ok": True} in answer["tables"]


def test_the_drill_says_which_count_differs(sealed, tmp_path, capsys):
    """An archive whose manifest counts one usage row more than its store holds fails the drill, in words."""
    _, _, key, archive, _ = sealed
    opener = Opener.from_files(str(key))
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    manifest = verify(archive, str(unpacked), opener)
    staged = {f.name: str(unpacked / f.name) for f in manifest.files}
    wrong = attrs.evolve(manifest, counts={**manifest.counts, "usage": manifest.counts["usage"] + 1})
    (tmp_path / "wrong").mkdir()
    crafted, _, _, _ = write_archive(str(tmp_path / "wrong"), wrong, staged)
    code, out, err = run(capsys, "server", "backup", "drill", crafted)
    assert code == 1
    assert any(line.startswith("  DIFF usage") and line.endswith("5 rows, manifest 6") for line in out.splitlines())
    assert err.strip() == "Drill FAILED: 1 table(s) differ from the manifest: usage"


def test_the_drill_refuses_a_damaged_archive(sealed, tmp_path, capsys):
    _, _, key, archive, _ = sealed
    raw = bytearray(Path(archive).read_bytes())
    raw[-100] ^= 0x01
    damaged = tmp_path / "damaged.tar.gz.age"
    damaged.write_bytes(bytes(raw))
    code, out, err = run(capsys, "server", "backup", "drill", str(damaged), "--identity", str(key))
    assert code == 2 and out == ""
    assert err.startswith(f"llmgw server backup drill: {damaged}: ") and err.endswith("; the drill failed")


def test_an_archive_in_clear_says_so(capsys, tmp_path):
    machine, _ = seeded_machine(tmp_path)
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    assert out.splitlines()[-1] == ("It is not encrypted and holds key and password hashes and private keys: set "
                                    "backup.encrypt_to (docs/backup.md), and keep copies off this machine.")


def test_keygen_makes_a_key_that_opens_what_its_recipient_seals(capsys, tmp_path):
    key = tmp_path / "key.txt"
    code, out, err = run(capsys, "server", "backup", "keygen", str(key))
    assert code == 0, err
    recipient = out.strip()
    assert recipient.startswith("age1") and os.stat(key).st_mode & 0o777 == 0o600
    sealed_bytes = pyrage.encrypt(b"hello", [pyrage.x25519.Recipient.from_str(recipient)])
    assert pyrage.decrypt(sealed_bytes, list(Opener.from_files(str(key)).identities)) == b"hello"
    before = key.read_bytes()
    code, _, err = run(capsys, "server", "backup", "keygen", str(key))
    assert code == 1 and "exists; it is never replaced" in err and key.read_bytes() == before


@pytest.mark.parametrize(("keys", "where", "words"), [
    ("encrypt_to: [age1notakey]", "backup.encrypt_to[0]", "not a valid age recipient"),
    ("encrypt_to: [hunter2]", "backup.encrypt_to[0]", "is not an age recipient"),
    ("copy_to: [backups/elsewhere]", "backup.copy_to[0]", "give an absolute path"),
    ("copy_to: ['ftp://host/x']", "backup.copy_to[0]", "ftp:// is not a kind of destination"),
    ("copy_to: ['s3://vault/llmgw']", "backup.s3_endpoint", "copy_to names s3://vault/llmgw; set backup.s3_endpoint"),
    ("schedule: sometimes", "backup.schedule", "neither an interval"),
    ("schedule: 1m", "backup.schedule", "shorter than 5 minutes"),
])
def test_bad_backup_settings_are_refused_naming_the_key(tmp_path, keys, where, words):
    machine = lay_out(tmp_path / "cp1")
    add_backup_keys(machine, keys)
    with pytest.raises(ConfigError) as caught:
        load_server_config(machine.config_path)
    said = [str(p) for p in caught.value.details]
    assert any(p.startswith(f"{where}: ") and words in p for p in said), said


def test_recipients_and_a_passphrase_together_are_refused(tmp_path):
    machine = lay_out(tmp_path / "cp1")
    _, recipient = new_key(tmp_path)
    add_backup_keys(machine, f"encrypt_to: [{recipient}]\npassphrase_file: {tmp_path}/pass")
    with pytest.raises(ConfigError, match="recipients or with a passphrase, not both"):
        load_server_config(machine.config_path)


@pytest.mark.slow  # age's scrypt takes about a second each way, on purpose
def test_a_passphrase_archive_round_trip(tmp_path, capsys):
    machine, seeded = seeded_machine(tmp_path)
    secret = tmp_path / "passphrase"
    secret.write_text("correct horse battery staple\n")
    add_backup_keys(machine, f"passphrase_file: {secret}")
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    archive = out.splitlines()[0]
    raw = Path(archive).read_bytes()
    assert raw.startswith(b"age-encryption.org/v1\n-> scrypt ")
    assert machine.token.read_text().strip().encode() not in raw
    wrong = tmp_path / "wrong"
    wrong.write_text("incorrect horse\n")
    fresh = lay_out(tmp_path / "cp2")
    code, _, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path),
                       "--passphrase-file", str(wrong), "--yes")
    assert code == 1 and "the passphrase does not open it" in err and not fresh.db.exists()
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path),
                         "--passphrase-file", str(secret), "--yes")
    assert code == 0, err
    check(fresh.store_dsn, seeded)
    # On the machine itself, server.yaml's backup.passphrase_file opens it without a flag.
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(machine.config_path), "--yes")
    assert code == 0, err
    check(machine.store_dsn, seeded)


def test_an_ssh_recipient_is_opened_with_its_ssh_private_key(tmp_path, capsys):
    import subprocess

    machine, seeded = seeded_machine(tmp_path)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@laptop", "-f",
                    str(tmp_path / "ops_key")], check=True)
    public = (tmp_path / "ops_key.pub").read_text().strip()
    add_backup_keys(machine, f"encrypt_to: ['{public}']")
    capsys.readouterr()
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    archive = out.splitlines()[0]
    assert machine.token.read_text().strip().encode() not in Path(archive).read_bytes()
    code, out, err = run(capsys, "server", "backup", "drill", archive, "--identity", str(tmp_path / "ops_key"))
    assert code == 0, err
    fresh = lay_out(tmp_path / "cp2")
    code, out, err = run(capsys, "server", "restore", archive, "--config", str(fresh.config_path),
                         "--identity", str(tmp_path / "ops_key"), "--yes")
    assert code == 0, err
    check(fresh.store_dsn, seeded)


def test_an_archive_that_does_not_read_back_fails_the_backup_and_is_removed(tmp_path, capsys, monkeypatch):
    """A disk that changes what was written (here: one byte flipped once the archive is on it)."""
    import llmgw.backup.archive as archive_module

    machine, _ = seeded_machine(tmp_path)
    _, recipient = new_key(tmp_path)
    add_backup_keys(machine, f"encrypt_to: [{recipient}]")
    written = archive_module.write_archive

    def write_then_rot(*args, **kwargs):
        path, size, digest, opener = written(*args, **kwargs)
        raw = bytearray(Path(path).read_bytes())
        raw[len(raw) // 2] ^= 0x01
        Path(path).write_bytes(bytes(raw))
        return path, size, digest, opener

    monkeypatch.setattr("llmgw.backup.make.write_archive", write_then_rot)
    capsys.readouterr()
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 1 and out == ""
    assert err.startswith("llmgw server backup: the archive just written did not read back whole (")
    assert err.strip().endswith("; it was removed. Check the disk of the backup folder")
    assert not list((machine.db.parent / "backups").glob("llmgw-backup-*"))
