"""`llmgw release keygen|sign|verify` through the CLI: what is accepted, and every refusal in words."""

from __future__ import annotations

import base64
import json
import stat

from tests.release.conftest import key_id_of, make_release

from llmgw.release.keys import parse_public_key
from llmgw.release.trust import trust_from
from llmgw.release.verify import ReleaseRefused, verify_release


def test_keygen_writes_a_private_key_only_its_owner_reads_and_prints_the_key_id(keys):
    folder, kid = keys
    private, public = folder / "llmgw-release.key", folder / "llmgw-release.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in private.read_bytes() and b"PUBLIC KEY" in public.read_bytes()
    assert len(kid) == 16 and parse_public_key(str(public), "test").id == kid


def test_keygen_never_writes_over_a_key(keys, llmgw):
    folder, _ = keys
    before = (folder / "llmgw-release.key").read_bytes()
    ran = llmgw("release", "keygen", "--out", folder)
    assert ran.code == 1 and "never writes over a key" in ran.err
    assert (folder / "llmgw-release.key").read_bytes() == before


def test_sign_lists_every_artifact_and_verify_accepts_it(keys, release, llmgw):
    folder, kid = keys
    ran = llmgw("release", "sign", "--key", folder / "llmgw-release.key", release)
    assert ran.code == 0, ran.err
    assert f"signed by key {kid}" in ran.out
    sums = (release / "SHA256SUMS").read_text()
    for name in ("llmgw-1.4.0-linux-x86_64.pyz", "llmgw-1.4.0-linux-aarch64.pyz",
                 "engines/llama_cpp_python-0.3.36.tar.gz"):
        assert f"  {name}\n" in sums
    assert json.loads((release / "SHA256SUMS.sig").read_text())["key_id"] == kid
    ran = llmgw("release", "verify", release, "--trust", folder / "llmgw-release.pub", "--json")
    assert ran.code == 0, ran.err
    assert sorted(f["path"] for f in json.loads(ran.out)["files"]) == sorted(
        line.split("  ", 1)[1] for line in sums.splitlines())


def test_sign_refuses_a_key_others_can_read(keys, release, llmgw):
    folder, _ = keys
    (folder / "llmgw-release.key").chmod(0o644)
    ran = llmgw("release", "sign", "--key", folder / "llmgw-release.key", release)
    assert ran.code == 1 and "chmod 600" in ran.err
    assert not (release / "SHA256SUMS").exists()


def _signed(keys, release, llmgw):
    folder, kid = keys
    assert llmgw("release", "sign", "--key", folder / "llmgw-release.key", release).code == 0
    return folder / "llmgw-release.pub", kid


def test_an_unsigned_release_is_refused(keys, release, llmgw):
    pub, _ = _signed(keys, release, llmgw)
    (release / "SHA256SUMS.sig").unlink()
    ran = llmgw("release", "verify", release, "--trust", pub)
    assert ran.code == 1 and "unsigned: SHA256SUMS.sig is missing" in ran.err


def test_a_release_with_no_checksums_is_refused(release, llmgw):
    ran = llmgw("release", "verify", release)
    assert ran.code == 1 and "no SHA256SUMS" in ran.err


def test_a_key_not_trusted_is_refused_by_name(keys, release, llmgw, tmp_path):
    _, kid = _signed(keys, release, llmgw)
    other = llmgw("release", "keygen", "--out", tmp_path / "other")
    ran = llmgw("release", "verify", release, "--trust", tmp_path / "other" / "llmgw-release.pub")
    assert ran.code == 1
    assert f"signed by key {kid}, which is not trusted here (trusted: {key_id_of(other.out)}" in ran.err
    ran = llmgw("release", "verify", release)  # nothing trusted at all: this build ships no key
    assert ran.code == 1 and "trusted: none" in ran.err


def test_a_revoked_key_is_refused_even_when_trusted(keys, release, llmgw):
    pub, kid = _signed(keys, release, llmgw)
    ran = llmgw("release", "verify", release, "--trust", pub, "--revoke", kid)
    assert ran.code == 1 and f"signed by key {kid}, which is revoked (--revoke)" in ran.err


def test_server_yaml_trusts_and_revokes(keys, release, llmgw, tmp_path):
    pub, kid = _signed(keys, release, llmgw)
    config = tmp_path / "etc" / "server.yaml"
    config.parent.mkdir()
    (config.parent / "release.pub").write_bytes(pub.read_bytes())
    config.write_text("releases:\n  trusted_keys: [release.pub]\n")
    assert llmgw("release", "verify", release, "--config", config).code == 0
    b64 = parse_public_key(str(pub), "t").base64
    config.write_text(f"releases:\n  trusted_keys: ['{b64}']\n  revoked_keys: [{kid}]\n")
    ran = llmgw("release", "verify", release, "--config", config)
    assert ran.code == 1 and f"which is revoked ({config}: releases.revoked_keys[0])" in ran.err
    config.write_text("releases:\n  trusted_keys: ['not a key']\n")
    ran = llmgw("release", "verify", release, "--config", config)
    assert ran.code == 1 and "releases.trusted_keys[0]" in ran.err


def test_a_changed_a_missing_and_an_extra_file_are_each_named(keys, release, llmgw):
    pub, _ = _signed(keys, release, llmgw)
    data = bytearray((release / "llmgw-1.4.0-linux-x86_64.pyz").read_bytes())
    data[10] ^= 1
    (release / "llmgw-1.4.0-linux-x86_64.pyz").write_bytes(bytes(data))
    (release / "engines" / "llama_cpp_python-0.3.36.tar.gz").unlink()
    (release / "llmgw-1.4.0-linux-riscv64.pyz").write_bytes(b"who put this here")
    ran = llmgw("release", "verify", release, "--trust", pub)
    assert ran.code == 1
    assert "llmgw-1.4.0-linux-x86_64.pyz: its sha256 is" in ran.err
    assert "engines/llama_cpp_python-0.3.36.tar.gz: listed in SHA256SUMS but missing" in ran.err
    assert "llmgw-1.4.0-linux-riscv64.pyz: present but not listed" in ran.err


def test_checksums_changed_after_signing_break_the_signature(keys, release, llmgw):
    pub, _ = _signed(keys, release, llmgw)
    (release / "extra.txt").write_text("smuggled")
    from llmgw.release.checksums import sha256_file

    with open(release / "SHA256SUMS", "a") as f:
        f.write(f"{sha256_file(release / 'extra.txt')}  extra.txt\n")
    ran = llmgw("release", "verify", release, "--trust", pub)
    assert ran.code == 1 and "does not match SHA256SUMS" in ran.err


def test_verify_release_is_a_function_upgrades_can_call(keys, release, llmgw):
    pub, kid = _signed(keys, release, llmgw)
    trust = trust_from(trusted=[str(pub)])
    files = verify_release(release, trust)
    assert {f.path for f in files} == {"llmgw-1.4.0-linux-x86_64.pyz", "llmgw-1.4.0-linux-aarch64.pyz",
                                       "engines/llama_cpp_python-0.3.36.tar.gz"}
    trust.revoke(kid, "a test")
    try:
        verify_release(release, trust)
    except ReleaseRefused as exc:
        assert exc.problems == [f"signed by key {kid}, which is revoked (a test)"]
    else:
        raise AssertionError("a revoked key was accepted")


def test_a_base64_key_works_as_well_as_its_file(keys, release, llmgw):
    pub, _ = _signed(keys, release, llmgw)
    b64 = base64.b64encode(parse_public_key(str(pub), "t").key.public_bytes_raw()).decode()
    assert llmgw("release", "verify", release, "--trust", b64).code == 0


def test_the_mirror_takes_in_only_a_verified_release_and_writes_nothing_otherwise(keys, release, llmgw, tmp_path):
    pub, kid = _signed(keys, release, llmgw)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    unsigned = make_release(tmp_path / "unsigned", "1.5.0")
    ran = llmgw("mirror", "release", "add", unsigned, "--dir", mirror, "--trust", pub)
    assert ran.code == 1 and "no SHA256SUMS" in ran.err and "nothing was written" in ran.err
    ran = llmgw("mirror", "release", "add", release, "--dir", mirror)  # an unknown key
    assert ran.code == 1 and "not trusted here" in ran.err
    ran = llmgw("mirror", "release", "add", release, "--dir", mirror, "--trust", pub, "--revoke", kid)
    assert ran.code == 1 and "revoked" in ran.err
    assert list(mirror.iterdir()) == []  # not even _llmgw/
    ran = llmgw("mirror", "release", "add", release, "--dir", mirror, "--trust", pub)
    assert ran.code == 0, ran.err
    assert "release 1.4.0: verified and added (3 files)" in ran.out
    stored = mirror / "_llmgw" / "releases" / "1.4.0"
    assert (stored / "llmgw-1.4.0-linux-aarch64.pyz").read_bytes() == (release / "llmgw-1.4.0-linux-aarch64.pyz").read_bytes()
    assert llmgw("release", "verify", stored, "--trust", pub).code == 0
    assert llmgw("mirror", "release", "list", "--dir", mirror).out.split() == ["1.4.0"]
    ran = llmgw("mirror", "release", "add", release, "--dir", mirror, "--trust", pub)
    assert ran.code == 0 and "already in the mirror" in ran.out
    assert llmgw("mirror", "list", "--dir", mirror, "--json").out.strip() == "[]"  # a release is not a model


def test_keys_built_into_the_file_are_trusted_and_can_be_revoked(keys, release, llmgw, tmp_path, monkeypatch):
    import configparser
    from pathlib import Path

    import llmgw.release.trust as trust_module

    pub, kid = _signed(keys, release, llmgw)
    package = tmp_path / "package"
    (package / "trusted_keys").mkdir(parents=True)
    (package / "trusted_keys" / "project.pub").write_bytes(pub.read_bytes())
    monkeypatch.setattr(trust_module.resources, "files", lambda name: package)
    ran = llmgw("release", "verify", release)  # no --trust, no server.yaml
    assert ran.code == 0, ran.err
    ran = llmgw("release", "verify", release, "--revoke", kid)
    assert ran.code == 1 and "revoked" in ran.err
    # and the folder goes into the build: the package data the wheel (and so the zipapp) is made with
    setup = configparser.ConfigParser()
    setup.read(Path(__file__).resolve().parents[2] / "setup.cfg")
    assert "release/trusted_keys/*.pub" in setup["options.package_data"]["llmgw"]


def test_this_build_ships_no_built_in_key():
    from llmgw.release.trust import builtin_keys

    assert builtin_keys() == []


def test_signing_again_replaces_both_and_a_link_or_an_empty_folder_is_refused(keys, release, llmgw, tmp_path):
    folder, _ = keys
    key = folder / "llmgw-release.key"
    assert llmgw("release", "sign", "--key", key, release).code == 0
    (release / "notes.txt").write_text("added later")
    assert llmgw("release", "sign", "--key", key, release).code == 0
    assert "  notes.txt\n" in (release / "SHA256SUMS").read_text()
    assert llmgw("release", "verify", release, "--trust", folder / "llmgw-release.pub").code == 0
    (release / "link.pyz").symlink_to(release / "notes.txt")
    ran = llmgw("release", "sign", "--key", key, release)
    assert ran.code == 1 and "link.pyz: not a plain file" in ran.err
    (tmp_path / "empty").mkdir()
    ran = llmgw("release", "sign", "--key", key, tmp_path / "empty")
    assert ran.code == 1 and "holds no files to sign" in ran.err


def test_the_control_plane_s_server_yaml_is_read_by_default(keys, release, llmgw, tmp_path, monkeypatch):
    import llmgw.cli.release_cmd as release_cmd

    pub, kid = _signed(keys, release, llmgw)
    config = tmp_path / "server.yaml"
    config.write_text(f"releases:\n  revoked_keys: [{kid}]\n")
    monkeypatch.delenv("LLMGW_CONFIG", raising=False)
    monkeypatch.setattr(release_cmd, "DEFAULT_CONFIG", str(config))
    ran = llmgw("release", "verify", release, "--trust", pub)
    assert ran.code == 1 and f"which is revoked ({config}: releases.revoked_keys[0])" in ran.err
    monkeypatch.setattr(release_cmd, "DEFAULT_CONFIG", str(tmp_path / "none.yaml"))
    assert llmgw("release", "verify", release, "--trust", pub).code == 0
