"""Copies off the machine (backup.copy_to): a folder, and ssh:// to a real sshd on a loopback port."""

from __future__ import annotations

import datetime as dt
import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from llmgw.backup import make_backup

from .conftest import free_port
from .test_backup_cli import run, seeded_machine
from .test_backup_encrypted import add_backup_keys, new_key


def archives_in(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("llmgw-backup-") and not n.endswith(".sha256"))


def ticking(start: dt.datetime):
    """A clock a minute later at each call, so each archive has its own name."""
    state = {"at": start}

    def now() -> dt.datetime:
        state["at"] += dt.timedelta(minutes=1)
        return state["at"]

    return now


def test_each_archive_is_copied_to_a_folder_checked_and_pruned_there(capsys, tmp_path):
    machine, _ = seeded_machine(tmp_path)
    elsewhere = tmp_path / "mnt" / "offsite"
    _, recipient = new_key(tmp_path)
    add_backup_keys(machine, f"encrypt_to: [{recipient}]\ncopy_to: [{elsewhere}]")
    with open(machine.config_path, encoding="utf-8") as f:
        text = f.read().replace("keep: 7", "keep: 2")
    machine.config_path.write_text(text)
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    archive = Path(out.splitlines()[0])
    assert f"  copied   {elsewhere}" in out.splitlines()
    copy = elsewhere / archive.name
    assert copy.read_bytes() == archive.read_bytes() and os.stat(copy).st_mode & 0o777 == 0o600
    # sha256sum -c checks the copy where it is
    done = subprocess.run(["sha256sum", "-c", archive.name + ".sha256"], cwd=elsewhere, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"{archive.name}: OK"

    import asyncio

    config = machine.config()
    clock = ticking(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    made = [asyncio.run(make_backup(config, config_path=str(machine.config_path), clock=clock)) for _ in range(2)]
    newest = [m.name for m in made]
    assert archives_in(elsewhere) == newest  # keep: 2 there as here
    assert archives_in(archive.parent) == newest
    assert made[-1].copies == (f"{elsewhere} (removed there: {archive.name})",)


def test_a_copy_that_fails_fails_the_backup_naming_where(capsys, tmp_path):
    machine, _ = seeded_machine(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the copies should go\n")
    good = tmp_path / "offsite"
    add_backup_keys(machine, f"copy_to: [{blocker}/sub, {good}]")
    capsys.readouterr()  # what setting up said (a handler an earlier main() left on a closed capture)
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 1 and out == ""
    assert err.startswith("llmgw server backup: the archive llmgw-backup-")
    assert f"was made and checked but not copied everywhere: backup.copy_to[0] {blocker}/sub: cannot write " in err
    assert err.strip().endswith(f"; it was copied to {good}")
    assert len(archives_in(good)) == 1  # the other destination was still tried
    # the archive itself is kept, whole, in the backup folder
    assert len(archives_in(machine.db.parent / "backups")) == 1


# ---------------------------------------------------------------- ssh, against a real sshd


def _wait_port(port: int, proc: subprocess.Popen, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("sshd did not answer")


@pytest.fixture
def sshd(tmp_path):
    """sshd on a loopback port with a throwaway host key, letting in one throwaway client key as this user."""
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd_bin):
        pytest.fail("sshd is not installed (apt-get install openssh-server; .ci/run installs it)")
    d = tmp_path / "sshd"
    d.mkdir(mode=0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "client_key")], check=True)
    shutil.copy(d / "client_key.pub", d / "authorized_keys")
    port = free_port()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {(d / 'host_key.pub').read_text()}")
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PidFile {d / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\n")
    os.makedirs("/run/sshd", exist_ok=True) if os.geteuid() == 0 else None
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_port(port, proc)
        yield {"port": port, "dir": d}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_archives_are_copied_over_ssh_checked_and_pruned_there(capsys, tmp_path, sshd):
    import asyncio

    machine, _ = seeded_machine(tmp_path)
    far = tmp_path / "vault" / "llmgw backups"  # a space: the far side's shell must get it quoted
    user = getpass.getuser()
    _, recipient = new_key(tmp_path)
    add_backup_keys(machine, f"encrypt_to: [{recipient}]\n"
                             f"copy_to: ['ssh://{user}@127.0.0.1:{sshd['port']}{far}']\n"
                             f"ssh_identity_file: {sshd['dir'] / 'client_key'}\n"
                             f"ssh_known_hosts_file: {sshd['dir'] / 'known_hosts'}")
    machine.config_path.write_text(machine.config_path.read_text().replace("keep: 7", "keep: 2"))
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    archive = Path(out.splitlines()[0])
    assert f"  copied   ssh://{user}@127.0.0.1:{sshd['port']}{far}" in out.splitlines()
    assert (far / archive.name).read_bytes() == archive.read_bytes()
    assert os.stat(far).st_mode & 0o777 == 0o700
    assert (far / (archive.name + ".sha256")).read_text() == (archive.parent / (archive.name + ".sha256")).read_text()

    config = machine.config()
    clock = ticking(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    made = [asyncio.run(make_backup(config, config_path=str(machine.config_path), clock=clock)) for _ in range(3)]
    assert archives_in(far) == [m.name for m in made[-2:]]
    assert not [n for n in os.listdir(far) if n.endswith(".partial")]


@pytest.mark.slow
def test_an_ssh_host_key_that_is_not_known_fails_the_copy(capsys, tmp_path, sshd):
    machine, _ = seeded_machine(tmp_path)
    wrong = tmp_path / "other_known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    wrong.write_text(f"[127.0.0.1]:{sshd['port']} {(tmp_path / 'stranger.pub').read_text()}")
    far = tmp_path / "vault"
    add_backup_keys(machine, f"copy_to: ['ssh://{getpass.getuser()}@127.0.0.1:{sshd['port']}{far}']\n"
                             f"ssh_identity_file: {sshd['dir'] / 'client_key'}\n"
                             f"ssh_known_hosts_file: {wrong}")
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 1 and out == ""
    assert "backup.copy_to[0] ssh://" in err and "ssh to 127.0.0.1 failed (exit 255)" in err
    assert not far.exists()


# ---------------------------------------------------------------- S3, against moto's S3 server


@pytest.fixture
def s3_server(tmp_path):
    """moto's S3 server on a loopback port checking every request's signature (after the three that make a
    user with an access key allowed s3:*), a bucket in it, and a credentials file for that key."""
    import sys

    boto3 = pytest.importorskip("boto3", reason="the S3 test needs moto[server] (pip install -e .[test])")
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_port(port, proc, 30.0)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="AKIDSETUP",
                           aws_secret_access_key="setup")
        iam.create_user(UserName="backup")
        iam.put_user_policy(UserName="backup", PolicyName="s3", PolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'))
        key = iam.create_access_key(UserName="backup")["AccessKey"]
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="eu-central-1",
                          aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
        s3.create_bucket(Bucket="vault", CreateBucketConfiguration={"LocationConstraint": "eu-central-1"})
        creds = tmp_path / "s3-credentials"
        creds.write_text(f"[default]\naws_access_key_id = {key['AccessKeyId']}\n"
                         f"aws_secret_access_key = {key['SecretAccessKey']}\n")
        yield {"endpoint": endpoint, "client": s3, "credentials": creds, "key_id": key["AccessKeyId"]}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_archives_are_copied_to_an_s3_bucket_and_pruned_there(capsys, tmp_path, s3_server):
    import asyncio

    machine, _ = seeded_machine(tmp_path)
    _, recipient = new_key(tmp_path)
    add_backup_keys(machine, f"encrypt_to: [{recipient}]\ncopy_to: ['s3://vault/llmgw/cp1']\n"
                             f"s3_endpoint: {s3_server['endpoint']}\ns3_region: eu-central-1\n"
                             f"s3_credentials_file: {s3_server['credentials']}")
    machine.config_path.write_text(machine.config_path.read_text().replace("keep: 7", "keep: 2"))
    capsys.readouterr()
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 0, err
    archive = Path(out.splitlines()[0])
    assert "  copied   s3://vault/llmgw/cp1" in out.splitlines()
    s3 = s3_server["client"]
    stored = s3.get_object(Bucket="vault", Key=f"llmgw/cp1/{archive.name}")["Body"].read()
    assert stored == archive.read_bytes()
    sidecar = s3.get_object(Bucket="vault", Key=f"llmgw/cp1/{archive.name}.sha256")["Body"].read().decode()
    assert sidecar == (archive.parent / (archive.name + ".sha256")).read_text()

    config = machine.config()
    clock = ticking(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    made = [asyncio.run(make_backup(config, config_path=str(machine.config_path), clock=clock)) for _ in range(2)]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="vault", Prefix="llmgw/cp1/")["Contents"])
    assert keys == sorted(f"llmgw/cp1/{m.name}{ext}" for m in made for ext in ("", ".sha256"))


@pytest.mark.slow
def test_wrong_s3_credentials_fail_the_copy_in_the_stores_words(capsys, tmp_path, s3_server):
    machine, _ = seeded_machine(tmp_path)
    wrong = tmp_path / "wrong-credentials"
    wrong.write_text(f"[default]\naws_access_key_id = {s3_server['key_id']}\naws_secret_access_key = not-the-key\n")
    add_backup_keys(machine, f"copy_to: ['s3://vault/llmgw']\ns3_endpoint: {s3_server['endpoint']}\n"
                             f"s3_credentials_file: {wrong}")
    capsys.readouterr()
    code, out, err = run(capsys, "server", "backup", "--config", str(machine.config_path))
    assert code == 1 and out == ""
    assert "backup.copy_to[0] s3://vault/llmgw: s3://vault/llmgw/llmgw-backup-" in err
    assert "was not stored (HTTP 403 SignatureDoesNotMatch" in err
    assert "not-the-key" not in err
