"""`llmgw join CODE` on a machine: become a node of the cluster the code is from.

Steps, each said as it happens:

1. read the code (refused here when it has expired: nothing is asked, nothing written);
2. read the CA certificate from the control plane's join endpoint and check its
   SHA-256 against the code's: a control plane of another cluster, or anyone
   in between, is refused before a word more is said;
3. make this node's private key here (it never leaves the machine) and send a
   signing request with the code's secret, over TLS trusting that CA alone;
4. with the certificate back, write agent.yaml, the key (0600), the
   certificate and the CA under <root>/etc/llmgw, install the agent's service
   and start it;
5. write the node's firewall table (the engines' ports open to the control
   planes only, llmgw.nodes.node_firewall), applied with `nft -f` on the
   machine itself where nft is installed, unless --no-firewall;
6. wait until the agent has registered with a control plane.

A refused code (used, expired, forged, of another CA) writes nothing.
`join_dry_run` does steps 1 and 2 and shows what the others would write,
without sending the code: it still works afterwards.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from llmgw.control.join_codes import JoinCode, JoinCodeError, parse_code
from llmgw.install.layout import Layout
from llmgw.install.manifest import Manifest, make_dirs
from llmgw.pki.certs import InvalidName, validate_node_id
from llmgw.pki.csr import ca_fingerprint_of_pem, make_node_request

__all__ = ["JoinError", "JoinResult", "join", "join_dry_run", "REGISTER_TIMEOUT"]

REGISTER_TIMEOUT = 60.0
HTTP_TIMEOUT = 10.0
REGISTERED_FILE = "registered.json"  # as llmgw.agent.agent writes it


class JoinError(Exception):
    """The machine did not join; the message says why and what to do."""


class JoinResult:
    def __init__(self, node: str, control_plane: str, files: list[Path]) -> None:
        self.node = node
        self.control_plane = control_plane
        self.files = files


def _checked(code_text: str, layout: Layout, name: str, now: Callable[[], dt.datetime]) -> tuple[JoinCode, str]:
    """The code and the node's name, once neither the code nor this machine refuses them."""
    try:
        code = parse_code(code_text)
    except JoinCodeError as exc:
        raise JoinError(str(exc)) from None
    if code.expires_at <= now():
        raise JoinError(f"this join code expired at {code.expires_at.isoformat()}; make a new one on the control "
                        "plane with `llmgw ctl node join-code`")
    node = _node_name(code, name)
    if layout.agent_yaml.exists():
        raise JoinError(f"this machine is a node already ({layout.agent_yaml} exists); `llmgw wipe` it first to "
                        "join again")
    return code, node


def join(code_text: str, *, root: str | os.PathLike[str] = "/", name: str = "",
         register_timeout: float = REGISTER_TIMEOUT, say: Callable[[str], None] = print, firewall: bool = True,
         now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> JoinResult:
    from llmgw.install.firewall import FirewallError
    from llmgw.nodes import node_firewall

    layout = Layout(Path(root))
    code, node = _checked(code_text, layout, name, now)
    ca_pem, address = _trusted_ca(code, say)
    request = make_node_request(node)
    say(f"made this node's key here (it stays on this machine); asking {address} for a certificate as {node!r}")
    answer = _post_join(address, ca_pem, {"code": code.id, "secret": code.secret, "node": node,
                                          "csr": request.csr_pem.decode()})
    cert_pem, planes = answer["cert"].encode(), [str(a) for a in answer.get("control_planes") or []]
    planes = list(dict.fromkeys([*planes, *code.addresses]))
    rules = node_firewall.node_ruleset(node_firewall.plane_networks(planes, say), node) if firewall else ""

    manifest = Manifest.load(layout)  # what is written from here on is listed for `llmgw wipe`
    files = _write_node_files(layout, manifest, node, request.key_pem, cert_pem, ca_pem, planes)
    for f in files:
        say(f"wrote {f}")
    if not firewall:
        say("firewall: left alone (--no-firewall)")
    else:
        try:  # before the agent starts, so no engine is ever up with its port open to all
            node_firewall.install_node_firewall(layout, manifest, rules, say)
        except FirewallError as exc:
            raise JoinError(f"the node's files are written, but its firewall table is not applied: {exc}; "
                            "`llmgw wipe` takes the files off again, or join with --no-firewall") from None
    started = time.time()
    say(_install_agent(layout, manifest))
    control_plane = _wait_registered(layout, started, register_timeout)
    say(f"node {node} registered with {control_plane}")
    return JoinResult(node, control_plane, files)


def join_dry_run(code_text: str, *, root: str | os.PathLike[str] = "/", name: str = "", firewall: bool = True,
                 say: Callable[[str], None] = print,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> str:
    """What `join` would write, as text: the code is checked and its CA's fingerprint verified, never sent."""
    from llmgw.install.service import unit_text
    from llmgw.nodes import node_firewall

    layout = Layout(Path(root))
    code, node = _checked(code_text, layout, name, now)
    _, address = _trusted_ca(code, say)
    planes = list(code.addresses)
    tls = layout.tls
    out = [f"llmgw join would make this machine node {node!r}, asking {address} for its certificate "
           "(the code is not sent: it still works)", "",
           f"== {layout.agent_yaml}", _agent_yaml_text(layout, node, planes).rstrip("\n"),
           "(control_planes: the code's; the control plane's answer may add more)",
           f"== {tls}/node-key.pem (0600): this node's key, made here", f"== {tls}/node.pem: its certificate, "
           f"signed by the control plane", f"== {tls}/ca.pem: the cluster CA checked above",
           f"== {layout.state}, {layout.logs}: the agent's state and logs", "",
           f"== {layout.unit('agent')}",
           unit_text(layout, "agent", _agent_argv(layout, None)).rstrip("\n"), ""]
    rules = node_firewall.node_ruleset(node_firewall.plane_networks(planes, say), node) if firewall else ""
    out += node_firewall.firewall_plan(layout, rules, firewall)
    out += ["", "start llmgw agent, and wait until it has registered"]
    return "\n".join(out) + "\n"


def _node_name(code: JoinCode, name: str) -> str:
    if code.name and name and code.name != name:
        raise JoinError(f"this join code is for node {code.name!r}; --name {name!r} does not match it")
    node = code.name or name or socket.gethostname().split(".")[0]
    try:
        return validate_node_id(node, what="node name")
    except InvalidName as exc:
        raise JoinError(f"{exc}; give one with --name") from None


def _trusted_ca(code: JoinCode, say: Callable[[str], None]) -> tuple[bytes, str]:
    """The CA certificate of the first control plane that answers, once its fingerprint is the code's."""
    unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE  # only to read the CA, which is then checked against the code
    problems = []
    for address in code.addresses:
        try:
            with urllib.request.urlopen(f"https://{address}/join/v1/ca", context=unverified,
                                        timeout=HTTP_TIMEOUT) as r:
                pem = r.read(1 << 20)
        except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
            problems.append(f"{address}: {_reason(exc)}")
            continue
        try:
            seen = ca_fingerprint_of_pem(pem)
        except Exception:  # noqa: BLE001 - whatever it sent, it is not the CA
            problems.append(f"{address}: answered with something that is not a CA certificate")
            continue
        if seen != code.ca_sha256:
            raise JoinError(f"the control plane at {address} presents a CA whose SHA-256 is {_colons(seen)}, not "
                            f"the code's {_colons(code.ca_sha256)}: the code is for another cluster, or someone "
                            "is in between; refused, nothing written")
        say(f"{address}: its CA's SHA-256 is the code's ({_colons(seen)[:23]}…)")
        return pem, address
    raise JoinError("no control plane in the code answered: " + "; ".join(problems))


def _post_join(address: str, ca_pem: bytes, body: dict) -> dict:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the chain to the code's CA and the address
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=ca_pem.decode())
    req = urllib.request.Request(f"https://{address}/join/v1", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=HTTP_TIMEOUT) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error") or exc.reason
        except ValueError:
            message = exc.reason
        raise JoinError(f"the control plane refused: {message}") from None
    except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
        raise JoinError(f"{address}: {_reason(exc)}; nothing written") from None


def _write_node_files(layout: Layout, manifest: Manifest, node: str, key_pem: bytes, cert_pem: bytes,
                      ca_pem: bytes, planes: list[str]) -> list[Path]:
    """agent.yaml, the key, the certificate and the CA; each folder made and file written goes in the manifest."""
    from llmgw.pki.certs import _write  # written through a file made with its final mode

    tls = layout.etc / "tls"
    for folder, mode in ((layout.etc, 0o755), (tls, 0o755), (layout.state, 0o750), (layout.logs, 0o750)):
        if not folder.exists():
            make_dirs(manifest, folder, mode)
    manifest.save()  # before the first file: a join that fails half-way is wiped all the same
    key, cert, ca = tls / "node-key.pem", tls / "node.pem", tls / "ca.pem"
    _write(key, key_pem, 0o600)
    _write(cert, cert_pem, 0o644)
    _write(ca, ca_pem, 0o644)
    _write(layout.agent_yaml, _agent_yaml_text(layout, node, planes).encode(), 0o644)
    written = [layout.agent_yaml, key, cert, ca]
    for f in written:
        manifest.add_file(f)
    manifest.save()
    return written


def _agent_yaml_text(layout: Layout, node: str, planes: list[str]) -> str:
    tls = layout.tls
    config = {
        "node_id": node,
        "control_planes": planes,
        "tls": {"cert": str(tls / "node.pem"), "key": str(tls / "node-key.pem"), "ca": str(tls / "ca.pem")},
        "state_dir": str(layout.state),
        "weights_dir": str(layout.state / "weights"),
        "engines_dir": str(layout.state / "engines"),
    }
    text = ("# Written by `llmgw join`. The mirror, every control plane and the other settings for nodes\n"
            "# come from the control plane; a key set here wins over what it says.\n")
    return text + "".join(f"{k}: {json.dumps(v)}\n" for k, v in config.items())


def _agent_argv(layout: Layout, manifest: Manifest | None) -> list[str]:
    """The agent's command: this very zipapp, copied to the layout's binary (not when `manifest` is None:
    a dry run), or this checkout's llmgw."""
    from llmgw.buildinfo import zipapp_path

    pyz = zipapp_path()
    config = ["agent", "--config", str(layout.agent_yaml)]
    if pyz is None:
        return [sys.executable, "-m", "llmgw", *config]
    target = layout.binary
    if manifest is not None and Path(pyz).resolve() != target.resolve():
        if not target.parent.exists():
            make_dirs(manifest, target.parent, 0o755)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(pyz, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
        manifest.add_file(target)
        manifest.save()
    return [sys.executable, str(target), *config]


def _install_agent(layout: Layout, manifest: Manifest) -> str:
    from llmgw.install.service import ServiceError, install_service, start_service

    try:
        argv = _agent_argv(layout, manifest)
        if not layout.units.exists():
            make_dirs(manifest, layout.units, 0o755, ours=False)
        written = install_service(layout, "agent", argv)
        manifest.add_unit("agent")
        manifest.save()
        return f"{written}; {start_service(layout, 'agent')}"
    except ServiceError as exc:
        raise JoinError(f"the node's files are written, but its agent could not be started: {exc}") from None


def _wait_registered(layout: Layout, since: float, timeout: float) -> str:
    path = layout.state / REGISTERED_FILE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if path.stat().st_mtime >= since - 1:
                return str(json.loads(path.read_text()).get("control_plane", "a control plane"))
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise JoinError(f"the agent did not register within {timeout:g} s; its log says why: "
                    f"{layout.log_file('agent')} (or `journalctl -u llmgw-agent`)")


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its certificate does not check against the code's CA ({reason.verify_message})"
    if reason is not None:
        return str(reason)
    return str(exc) or type(exc).__name__


def _colons(hexdigest: str) -> str:
    return ":".join(hexdigest[i:i + 2] for i in range(0, len(hexdigest), 2)).upper()
