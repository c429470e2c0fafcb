"""`llmgw ctl signin` / `signout`: the admin API without the admin token, through the OIDC provider.

The device flow (RFC 8628): ctl shows an address and a code, the operator
approves at the provider in any browser, and the access token is kept in
their own ~/.config/llmgw/oidc-tokens.json (0600) for this admin API. Every
ctl command and the console then use it while it lasts, when there is no
admin token to read. The server accepts it for people whose staff role is
admin (docs/sso.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from llmgw.cli.ctl_client import DEFAULT_URL, ENV_URL, AdminClient, CtlError

DEFAULT_CONFIG = "/etc/llmgw/server.yaml"


def register(sub) -> None:
    signin = sub.add_parser(
        "signin", help="Sign in through the single sign-on provider (device flow) instead of the admin token.",
        description="Sign in through the OIDC provider's device flow: open the address shown, enter the code, and "
        "approve. The token is kept in ~/.config/llmgw/oidc-tokens.json (mode 0600) for this admin API, and ctl "
        "and the console use it when no admin token can be read. Only people whose staff role is admin are "
        "let in. The provider comes from --issuer/--client-id, else from server.yaml's auth.oidc "
        "(issuer, device_client_id or client_id).",
    )
    _common(signin)
    signin.add_argument("--issuer", metavar="URL", help="the provider's issuer URL (default: server.yaml's)")
    signin.add_argument("--client-id", metavar="ID",
                        help="the public client to sign in as (default: auth.oidc.device_client_id, else client_id)")
    signin.set_defaults(handler=_signin)
    signout = sub.add_parser("signout", help="Forget the token llmgw ctl signin kept for this admin API.",
                             description="Forget the token llmgw ctl signin kept for this admin API.")
    _common(signout)
    signout.set_defaults(handler=_signout)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--admin", metavar="URL", help=f"the admin API (default ${ENV_URL}, else {DEFAULT_URL})")
    parser.add_argument("--config", metavar="FILE", default=os.environ.get("LLMGW_CONFIG", DEFAULT_CONFIG),
                        help=f"the server.yaml naming the provider (default $LLMGW_CONFIG, else {DEFAULT_CONFIG})")


def _url(args: argparse.Namespace) -> str:
    url = args.admin or os.environ.get(ENV_URL, "").strip() or DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        raise CtlError(f"--admin: {url!r} is not an address like {DEFAULT_URL}", 2)
    return url.rstrip("/")


def _provider(args: argparse.Namespace) -> tuple[str, str, list[str]]:
    issuer, client_id, scopes = args.issuer, args.client_id, ["openid", "email", "profile"]
    if not issuer or not client_id:
        from llmgw.config import ConfigError, load_server_config

        try:
            oidc = load_server_config(args.config).auth.oidc
        except (ConfigError, OSError) as exc:
            raise CtlError(f"give --issuer and --client-id, or a readable server.yaml with auth.oidc (--config): "
                           f"{exc}", 2) from None
        issuer = issuer or oidc.issuer
        client_id = client_id or oidc.device_client_id or oidc.client_id
        scopes = list(oidc.scopes) or scopes
    if not issuer or not client_id:
        raise CtlError(f"{args.config} sets no auth.oidc.issuer and client_id: single sign-on is off there", 2)
    return issuer, client_id, scopes


def provider_configured(config_path: str) -> bool:
    """True when ``config_path`` is a readable server.yaml with single sign-on set up."""
    from llmgw.config import ConfigError, load_server_config

    try:
        oidc = load_server_config(config_path).auth.oidc
    except (ConfigError, OSError):
        return False
    return bool(oidc.issuer and (oidc.device_client_id or oidc.client_id))


def signed_in_instead(args: argparse.Namespace, exc: CtlError, who: str = "llmgw ctl") -> bool:
    """After ``exc``: when it says there is no admin token, none was named, and this machine's
    server.yaml ($LLMGW_CONFIG, else /etc/llmgw/server.yaml) names a single sign-on provider,
    sign in through its device flow (as `llmgw ctl signin`); True when that worked."""
    from llmgw.cli.ctl_client import DEFAULT_URL as default_url

    if not exc.message.startswith("no admin token") or getattr(args, "token_file", None):
        return False
    config = os.environ.get("LLMGW_CONFIG", DEFAULT_CONFIG)
    if not provider_configured(config):
        return False
    url = getattr(args, "admin", None) or os.environ.get(ENV_URL, "").strip() or default_url
    print(f"{who}: no admin token here; signing in through the single sign-on provider ({config})",
          file=sys.stderr)
    return sign_in_for(url, config) == 0


def sign_in_for(url: str, config_path: str) -> int:
    """The device sign-in for ``url`` with the provider of ``config_path`` (what the console does
    when it has no admin token); the exit status, its reason on stderr."""
    args = argparse.Namespace(admin=url, config=config_path, issuer=None, client_id=None)
    return _signin(args)


def _signin(args: argparse.Namespace) -> int:
    from llmgw.auth.oidc import OIDCError
    from llmgw.auth.oidc_device import save, sign_in

    try:
        url = _url(args)
        issuer, client_id, scopes = _provider(args)

        def show(code) -> None:
            print(f"Open {code.verification_uri} and enter the code {code.user_code}", file=sys.stderr)
            if code.verification_uri_complete:
                print(f"(or open {code.verification_uri_complete})", file=sys.stderr)
            print(f"Waiting up to {code.expires_in // 60 or 1} min for the approval...", file=sys.stderr)

        signed = sign_in(issuer, client_id, scopes, show)
        # Asked once now, so a person the admin API would refuse learns it here, not at the next command.
        AdminClient(url, signed.access_token, "signin").get("/openapi.json")
        path = save(url, signed)
    except OIDCError as exc:
        print(f"llmgw ctl signin: {exc}", file=sys.stderr)
        return 1
    except CtlError as exc:
        print(f"llmgw ctl signin: {exc.message}", file=sys.stderr)
        return exc.code
    left = max(0, int(signed.expires_at - time.time()))
    print(f"signed in to {url} for {left // 60} min; the token is kept in {path}")
    return 0


def _signout(args: argparse.Namespace) -> int:
    from llmgw.auth.oidc_device import forget

    try:
        url = _url(args)
    except CtlError as exc:
        print(f"llmgw ctl signout: {exc.message}", file=sys.stderr)
        return exc.code
    print(f"signed out of {url}" if forget(url) else f"no sign-in was kept for {url}")
    return 0
