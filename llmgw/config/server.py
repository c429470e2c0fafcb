"""server.yaml: what a control plane reads when it starts.

One frozen class per section. A section the file leaves out has its
defaults; a key the file misspells is an error (see load.py). To add a key,
add a `setting()` to its section with a default and a one-sentence doc for
the operator, then regenerate docs/reference.md.
"""

from typing import Any, Literal

import attrs

from llmgw.config.fields import section, setting
from llmgw.config.mail import MailConfig
from llmgw.config.secrets import Secret
from llmgw.config.units import ByteSize, Duration

__all__ = [
    "ServerConfig",
    "ServerTLS",
    "StoreConfig",
    "OIDCConfig",
    "AuthConfig",
    "RouterTimeouts",
    "RetryConfig",
    "AffinityConfig",
    "CacheConfig",
    "BatchConfig",
    "RouterConfig",
    "Band",
    "AdmissionConfig",
    "AccountingConfig",
    "BackoffConfig",
    "ControlConfig",
    "MirrorConfig",
    "ReleasesConfig",
    "GuardConfig",
    "NotifySink",
    "NotifyConfig",
    "Price",
    "PricesConfig",
    "Endpoint",
    "Profile",
    "Scaling",
    "ModelConfig",
    "ModelClass",
    "ModelRole",
    "Capabilities",
    "JudgeSpec",
    "AdapterConfig",
    "GuardMode",
    "TracingConfig",
    "BudgetsConfig",
    "FederationPeer",
    "FederationConfig",
]

ModelClass = Literal["critical", "standard", "opportunistic"]
GuardMode = Literal["enforce", "shadow", "off"]


@attrs.frozen
class ServerTLS:
    """The agent port's certificate files, from llmgw's own authority, as PEM paths."""

    cert: str = setting(
        "/etc/llmgw/tls/server.pem",
        doc="This control plane's certificate, with every address agents dial in it.",
    )
    key: str = setting(
        "/etc/llmgw/tls/server-key.pem", doc="The private key of that certificate, readable by llmgw only."
    )
    ca: str = setting(
        "/etc/llmgw/tls/ca.pem",
        doc="The cluster's authority certificate; an agent's certificate must be signed by it.",
    )


@attrs.frozen
class StoreConfig:
    """Where users, keys, usage and the catalog are kept: SQLite for one control plane, PostgreSQL for several."""

    dsn: Secret = setting(
        Secret("/var/lib/llmgw/llmgw.db"),
        doc="A SQLite file's path, or a PostgreSQL address like postgres://llmgw:PASSWORD@db:5432/llmgw; "
        "write env:NAME or file:/path to keep a password out of this file.",
    )
    pool_min: int = setting(1, doc="PostgreSQL connections kept open even when idle (SQLite ignores it).")
    pool_max: int = setting(10, doc="Most PostgreSQL connections open at once (SQLite ignores it).")

    @property
    def backend(self) -> str:
        """`postgres` for a postgres:// or postgresql:// address, else `sqlite`."""
        dsn = self.dsn.reveal()
        return "postgres" if dsn.startswith(("postgres://", "postgresql://")) else "sqlite"


@attrs.frozen
class OIDCClaims:
    """Which of the provider's claims give a person's address and name."""

    email: str = setting("email", doc="The claim holding the person's email address; their account is found by it.")
    name: str = setting("name", doc="The claim holding the name shown for them.")


@attrs.frozen
class OIDCRule:
    """When a claim matches, the person gets a staff role, an organization, or both."""

    claim: str = setting(doc="The claim looked at, like groups or email.")
    equals: str = setting("", doc="Matches when the claim (or one of its values, for a list) is exactly this.")
    contains: str = setting("", doc="Matches when the claim is a list holding this value, or text containing it.")
    suffix: str = setting("", doc="Matches when the claim (or one of its values) ends with this, like @acme.com.")
    role: str = setting("", doc="The staff role given (viewer, operator, billing, admin); empty gives none.")
    org: str = setting("", doc="The organization the person is made a member of; empty adds none.")


@attrs.frozen
class OIDCConfig:
    """Sign-in to the portal through your identity provider; off while issuer is empty."""

    issuer: str = setting(
        "",
        doc="The provider's issuer URL, like https://login.example.com/realms/acme; empty turns single sign-on off.",
    )
    client_id: str = setting("", doc="The client id llmgw is registered under at the provider.")
    client_secret: Secret | None = setting(
        None, doc="The client secret from the provider; env:NAME or file:/path keeps it out of this file."
    )
    redirect_url: str = setting(
        "",
        doc="The portal's callback address as registered at the provider, like https://llm.example.com/auth/callback.",
    )
    scopes: list[str] = setting(
        factory=lambda: ["openid", "email", "profile"], doc="Scopes asked of the provider."
    )
    no_passwords: bool = setting(
        False, doc="Refuse local passwords on the portal, so everyone signs in through the provider."
    )
    display_name: str = setting(
        "", doc="The provider's name on the portal's button, as in Sign in with Okta; empty says single sign-on."
    )
    claims: OIDCClaims = section(OIDCClaims, doc="Which claims give a person's address and name.")
    rules: list[OIDCRule] = setting(
        factory=list,
        doc=("Staff roles and organizations from claims, checked at every sign-in; when any rule gives a role, "
             "the roles come from the rules alone (the first rule that matches wins, none is no staff role)."),
    )
    clock_skew: Duration = setting(
        Duration(seconds=60), doc="How far the provider's clock may be from ours when token times are checked."
    )
    device_client_id: str = setting(
        "", doc="The public client llmgw ctl and the console sign in as with the device flow; empty is client_id."
    )


@attrs.frozen
class AuthConfig:
    """Who may use the client API and the portal."""

    keys_required: bool = setting(
        True,
        doc="Every client request needs an API key; false lets anyone who reaches the client API use it, for one machine or a demo.",
    )
    signup_open: bool = setting(
        False,
        doc="Let people create their own portal accounts; false leaves that to an administrator (llmgw users create).",
    )
    session_ttl: Duration = setting(Duration(hours=12), doc="How long a portal sign-in lasts.")
    session_idle: Duration = setting(Duration(hours=2), doc="A portal session unused for this long ends.")
    max_key_ttl: Duration = setting(
        Duration(0), doc="The longest an API key may live; 0 lets keys live until revoked."
    )
    default_rpm: int = setting(
        0, doc="Requests a minute allowed to a key with no limit of its own; 0 is no limit."
    )
    default_tpm: int = setting(
        0, doc="Tokens a minute allowed to a key with no limit of its own; 0 is no limit."
    )
    key_hash_secret_file: str = setting(
        "",
        doc=("The secret API keys are hashed with (an HMAC), made mode 0600 at first start; empty is key-hash-secret "
             "beside admin_token_file. Every control plane on one store needs the same file."),
    )
    oidc: OIDCConfig = section(OIDCConfig, doc="Single sign-on through an OpenID Connect provider.")


@attrs.frozen
class RouterTimeouts:
    """How long the router waits on an engine."""

    dial: Duration = setting(
        Duration(seconds=5), doc="Longest wait to connect to an engine before another replica is tried."
    )
    first_byte: Duration = setting(
        Duration(seconds=120),
        doc="Longest wait for an engine's first byte; long prompts take a while to read.",
    )
    idle: Duration = setting(
        Duration(seconds=60),
        doc="Longest silence between two pieces of a streamed answer before it is cut off.",
    )
    total: Duration = setting(Duration(minutes=30), doc="Longest a whole request may take; 0 is no limit.")


@attrs.frozen
class RetryConfig:
    """Trying another replica when the first one fails before answering."""

    attempts: int = setting(
        2, doc="More replicas to try when one refuses or fails before sending anything; 0 tries only one."
    )
    backoff: Duration = setting(Duration(milliseconds=100), doc="Pause before each further try.")


@attrs.frozen
class AffinityConfig:
    """Sending related requests to the same replica, where its cache already holds their start."""

    session: bool = setting(
        True, doc="Send a conversation's turns to the replica that served the turn before, while it has room."
    )
    prefix: bool = setting(True, doc="Prefer the replica whose cache holds the longest start of the prompt.")
    session_ttl: Duration = setting(
        Duration(minutes=10), doc="How long a conversation stays with its replica after its last request."
    )


@attrs.frozen
class CacheConfig:
    """Memory for the answers of projects that reuse them (llmgw keys cache); nothing is reused until a project turns it on."""

    max_bytes: ByteSize = setting(
        ByteSize(128 * 1024**2), doc="All cached answers together; the least recently used go first."
    )
    max_entry_bytes: ByteSize = setting(ByteSize(1024**2), doc="The largest single answer kept.")


@attrs.frozen
class BatchConfig:
    """The Files and Batch APIs: how much a batch may hold, how fast it runs, how long its results stay."""

    concurrency: int = setting(
        8, doc="Lines of batches this control plane sends at once, in the lowest priority band."
    )
    output_retention: Duration = setting(
        Duration(hours=720), doc="How long the output and error files a batch writes are kept; 0 keeps them until deleted."
    )
    max_file_bytes: ByteSize = setting(
        ByteSize(128 * 1024**2), doc="The largest file a client may upload to /v1/files."
    )
    max_lines: int = setting(50_000, doc="The most requests one batch may hold.")


@attrs.frozen
class ClientLimits:
    """What one client may take of the client API: its connections, how slowly it may send, what it may keep."""

    header_timeout: Duration = setting(
        Duration(seconds=10),
        doc="Longest a connection may take to send a request's headers; a slower one is closed (slowloris).",
    )
    body_timeout: Duration = setting(
        Duration(seconds=60),
        doc="Longest a JSON body may take to arrive, and longest an upload may pause between two pieces; then 408.",
    )
    idle_timeout: Duration = setting(
        Duration(seconds=75), doc="Longest a kept-alive connection may sit idle between requests before it is closed."
    )
    max_connections: int = setting(
        4096, doc="Open connections to the client API in all; past it a new one is answered 503 with Retry-After."
    )
    max_connections_per_client: int = setting(
        256, doc="Open connections from one address; past it that address is answered 503 with Retry-After."
    )
    max_json_depth: int = setting(
        64, doc="How deeply objects and arrays may nest in a JSON body; deeper is refused with 400."
    )
    project_storage_bytes: ByteSize = setting(
        ByteSize(10 * 1024**3),
        doc="What one project (else one person) may keep at once: files, batch results, thread turns, memory "
            "notes and stored responses; past it new ones are refused with 413. 0 is no limit.",
    )


@attrs.frozen
class RoutingProfile:
    """A routing profile keys are given (llmgw keys routing): which replicas serve them, and which first."""

    name: str = setting(
        doc="The name keys are given: lower-case letters, digits, '-' and '_'; not a built-in one "
            "(default, latency-first, cost-first, pinned:POOL)."
    )
    prefer: Literal["default", "latency", "cost"] = setting(
        "default",
        doc="Among the replicas it allows: default (affinity, then the least busy), latency (the least busy, "
            "a warm prefix cache breaking ties) or cost (the cluster's own engines, then server.yaml's "
            "endpoints, then federation peers, the least busy within each).",
    )
    labels: dict[str, str] = setting(
        factory=dict,
        doc="Node labels a replica's node must all have, like {pool: eu}; set, only the cluster's own "
            "replicas on such nodes serve its keys. Empty allows every replica.",
    )


@attrs.frozen
class RouterConfig:
    """The client API: how requests reach a replica and come back."""

    scrape_interval: Duration = setting(
        Duration(seconds=2),
        doc="How often each replica's engine metrics (queue, cache use) are read to choose between replicas.",
    )
    inject_usage: bool = setting(
        True,
        doc="Ask engines for token counts on streamed answers, and hide them from a client that did not ask.",
    )
    max_body_bytes: ByteSize = setting(
        ByteSize(32 * 1024**2), doc="The largest request body accepted; a larger one is refused with 413."
    )
    trusted_proxies: list[str] = setting(
        factory=list,
        doc="Addresses or networks (CIDR) of proxies in front of llmgw whose X-Forwarded-* headers are believed; none by default.",
    )
    timeouts: RouterTimeouts = section(RouterTimeouts, doc="How long the router waits on an engine.")
    retries: RetryConfig = section(RetryConfig, doc="Trying another replica when one fails.")
    affinity: AffinityConfig = section(AffinityConfig, doc="Keeping related requests on one replica.")
    cache: CacheConfig = section(CacheConfig, doc="The answer cache's memory.")
    batch: BatchConfig = section(BatchConfig, doc="The Files and Batch APIs.")
    clients: ClientLimits = section(ClientLimits, doc="Limits on what one client may take.")
    profiles: list[RoutingProfile] = setting(  # routing profiles (llmgw.router.routing_profiles)
        factory=list,
        doc="Routing profiles of this cluster's own, beside the built-in default, latency-first, cost-first "
            "and pinned:POOL; keys, projects and organizations are given one with llmgw keys routing.",
    )
    tag_labels: list[str] = setting(
        factory=list,
        doc="Request tags (x-llmgw-tags: name=value,...) whose values become labels of the same name on "
            "llmgw_requests_total, like [team, app]; none by default.",
    )
    tag_label_values: int = setting(
        20, doc="Distinct values each tag label takes in one gateway process; later ones are counted as `other`."
    )


@attrs.frozen
class Band:
    """A priority band: requests of keys in it wait in its own queue."""

    name: str = setting(doc="The band's name, as keys and the x-llmgw-band header give it.")
    weight: int = setting(
        1, doc="Share of freed capacity this band gets while several bands wait; higher is served sooner."
    )
    max_wait: Duration | None = setting(None, doc="Longest wait in this band; empty uses admission.max_wait.")


def _default_bands() -> list[Band]:
    return [Band("gold", 4), Band("silver", 2), Band("bronze", 1)]


@attrs.frozen
class AdmissionConfig:
    """Queueing requests when every replica of a model is busy."""

    queue_depth: int = setting(256, doc="Requests that may wait for one model; the next is refused with 429.")
    max_wait: Duration = setting(
        Duration(seconds=30), doc="Longest a request waits for a free replica before it is refused with 503."
    )
    bands: list[Band] = setting(factory=_default_bands, doc="Priority bands, highest first.")
    default_band: str = setting("silver", doc="The band of a key that names none.")


@attrs.frozen
class AccountingConfig:
    """Recording usage: one row per request, written in batches off the request path."""

    flush_interval: Duration = setting(
        Duration(milliseconds=200), doc="Longest a usage row waits in memory before it is written."
    )
    batch_size: int = setting(500, doc="Most rows written to the store at once.")
    buffer_size: int = setting(
        8192,
        doc="Rows held in memory while the store is slow; beyond that the oldest are counted and dropped, never a request delayed.",
    )
    usage_retention: Duration = setting(
        Duration(hours=2160),
        doc="How long each request's record is kept (what llmgw ctl request reads); sums for charts and budgets are kept anyway; 0 keeps every record.",
    )


@attrs.frozen
class BackoffConfig:
    """Waiting before starting a failed replica again."""

    initial: Duration = setting(
        Duration(seconds=10), doc="Wait after the first failed start; it doubles after each failure."
    )
    max: Duration = setting(Duration(minutes=5), doc="The longest wait between two starts.")


@attrs.frozen
class ControlConfig:
    """The scheduler: which replicas run where."""

    enabled: bool = setting(
        True, doc="Run the scheduler here; false makes this control plane a gateway only."
    )
    heartbeat_window: Duration = setting(
        Duration(seconds=15),
        doc="A node not heard from for this long is lost, and its replicas are placed elsewhere.",
    )
    reconcile_interval: Duration = setting(
        Duration(seconds=5), doc="How often what runs is compared with what the catalog wants."
    )
    timezone: str = setting(
        "UTC", doc="The time zone scaling schedules are written in (an IANA name such as Europe/Berlin)."
    )
    lease_ttl: Duration = setting(
        Duration(seconds=15),
        doc="How long leadership lasts unless renewed (every third of it); a standby takes over once it lapses.",
    )
    backoff: BackoffConfig = section(BackoffConfig, doc="Waiting between starts of a failing replica.")
    park_after: int = setting(
        5,
        doc="Failed starts in a row after which a model is parked, left stopped until an operator retries it.",
    )
    rollback_window: Duration = setting(
        Duration(hours=24),
        doc="How long after an update or a promotion `llmgw ctl model rollback` may return a model to the "
            "revision it replaced.",
    )


@attrs.frozen
class MirrorConfig:
    """The cluster's mirror of model files (llmgw mirror)."""

    url: str = setting(
        "",
        doc="The mirror's file server, like http://models.internal:8081, which nodes fetch weights from; empty fetches from each model's source.",
    )
    api: str = setting(
        "",
        doc="The mirror's API, like https://models.internal:8082, reached with agent_tls's certificate; empty when there is no mirror.",
    )
    registry: str = setting(
        "",
        doc="The model registry update checks ask when there is no mirror API, in Hugging Face's API shape; empty is https://huggingface.co.",
    )
    update_check: Duration = setting(
        Duration(hours=6),
        doc="How often the leader asks whether the repositories served models came from have new files; 0 never asks.",
    )
    offline: bool = setting(
        False,
        doc="This site has no way out (docs/releases.md): the control plane asks no registry outside (update "
        "checks refused in words), and every model's weights must come from the mirror (mirror.url).",
    )


@attrs.frozen
class ReleasesConfig:
    """Which signed llmgw releases this cluster takes in (llmgw release, docs/releases.md)."""

    trusted_keys: list[str] = setting(
        factory=list,
        doc="Public release keys trusted beside the ones built into llmgw: each a PEM file's path (relative to "
        "this file's folder) or the base64 of the key, as `llmgw release keygen` wrote it.",
    )
    revoked_keys: list[str] = setting(
        factory=list,
        doc="Key ids (16 hex digits) never trusted, wherever else they are named, the built-in keys included.",
    )


@attrs.frozen
class GuardConfig:
    """Guardrails: checks on what goes to a model and what comes back."""

    mode: GuardMode = setting(
        "enforce", doc="enforce applies the policies, shadow records what they would do, off checks nothing."
    )
    default: list[str] = setting(factory=list, doc="Policies applied to every request, by name.")
    policies: dict[str, dict[str, Any]] = setting(
        factory=dict,
        doc="Named policies (input, output, tools, judge, ...), attached by name; see the guardrails manual.",
    )


@attrs.frozen
class NotifySink:
    """Somewhere events are sent: a webhook, Slack, or a kind a plugin adds."""

    url: Secret = setting(doc=("Where the event is posted. A Slack webhook's address is itself a key: "
                               "env:NAME or file:/path keeps it out of this file."))
    name: str = setting(
        "", doc="A name for this sink in logs, metrics and llmgw ctl notify test; empty: sinks[N] and its host "
        "(never its whole address: a Slack webhook's path is its key)."
    )
    kind: str = setting("webhook", doc="webhook (signed JSON), slack, or a kind a notify plugin adds.")
    secret: Secret | None = setting(
        None, doc="Key that signs each webhook body (HMAC-SHA256); env:NAME or file:/path."
    )
    events: list[str] = setting(
        factory=list, doc="Events to send, of model_parked, node_lost, budget_spent, model_update_available "
        "and backup_failed; empty sends them all."
    )


@attrs.frozen
class NotifyConfig:
    """Telling people when something needs them."""

    sinks: list[NotifySink] = setting(factory=list, doc="Where events go.")
    repeat_after: Duration = setting(
        Duration(hours=1), doc="The same event about the same thing is sent again only after this long."
    )


@attrs.frozen
class Price:
    """A price in the currency of prices.currency, per million tokens."""

    input: float = setting(0.0, doc="Per million prompt tokens.")
    output: float = setting(0.0, doc="Per million tokens generated.")


@attrs.frozen
class PricesConfig:
    """What usage costs, for budgets and reports."""

    currency: str = setting("USD", doc="The currency every price is in, as shown in reports.")
    default: Price = section(Price, doc="The price of a model that gives none.")


@attrs.frozen
class Endpoint:
    """A provider that serves a model outside the cluster, over an OpenAI- or Anthropic-shaped API."""

    url: str = setting(doc="The provider's API base, like https://api.openai.com/v1.")
    api_key: Secret | None = setting(
        None, doc="The provider's key; env:NAME or file:/path keeps it out of this file."
    )
    api: Literal["openai", "anthropic"] = setting(
        "openai", doc="The shape of the provider's API: openai or anthropic."
    )
    model: str = setting("", doc="The model's name at the provider; empty uses the catalog name.")


@attrs.frozen
class Profile:
    """One way to run a model: an engine, and what it needs of a node."""

    name: str = setting("default", doc="Names the profile in placement and logs; unique within the model.")
    engine: str = setting(
        "",
        doc="The engine to run (llamacpp, vllm, sglang, trtllm, sim, or a plugin's); empty uses the model's engine.",
    )
    gpus: int = setting(0, doc="GPUs each replica needs on one node; 0 runs on CPUs.")
    gpu_class: str = setting("", doc="Only cards of this class, like h100-80g; empty takes any.")
    nodes: int = setting(
        1,
        doc="Nodes one replica runs over (vLLM, SGLang), each with gpus cards, all on one RDMA fabric; 1 is one node.",
    )
    tensor_parallel: int = setting(
        0, doc="The replica's tensor-parallel size; 0 is every card of every node over pipeline_parallel."
    )
    pipeline_parallel: int = setting(
        0, doc="The replica's pipeline-parallel size; 0 is 1. tensor_parallel × pipeline_parallel is gpus × nodes."
    )
    memory: ByteSize = setting(ByteSize(0), doc="Host memory reserved for each replica; 0 reserves none.")
    cores: int = setting(0, doc="CPU cores reserved for each replica; 0 reserves none.")
    args: list[str] = setting(factory=list, doc="Extra command-line arguments for the engine.")
    env: dict[str, str] = setting(factory=dict, doc="Extra environment variables for the engine.")
    node_selector: dict[str, str] = setting(
        factory=dict, doc="Node labels a node must have to run this profile, like llmgw.io/rack: r12-07."
    )


@attrs.frozen
class PowerBudget:
    """What one rack, PDU, row or room may draw."""

    domain: str = setting(doc="The domain, as level:name: rack:r12-07, pdu:r12-07-a, row:12, room:hall-b, site:sto1.")
    cap_watts: int = setting(doc="The most it may draw, in watts (for a dual-fed rack: what one feed carries alone).")
    other_watts: int = setting(0, doc="What it draws besides llmgw's nodes: switches, storage.")


@attrs.frozen
class FacilityConfig:
    """Where nodes stand and what their racks and PDUs may draw (node labels llmgw.io/site, room, row, rack, pdu)."""

    budgets: list[PowerBudget] = setting(factory=list, doc="Power caps placement keeps each domain within.")
    margin: float = setting(0.1, doc="The share of every cap kept free (0.1: placement fills 90% of it).")
    gpu_watts: int = setting(
        0, doc="The draw of a card that reports no power limit; 0: such a card counts as nothing."
    )
    cpu_core_watts: int = setting(0, doc="The draw of each core a CPU replica reserves.")
    node_watts: int = setting(0, doc="Each node's own draw beyond its cards.")


@attrs.frozen
class ScalingWindow:
    """A time of the week when a model keeps a different number of replicas (office hours, a nightly batch)."""

    from_: str = setting(doc="When it begins, HH:MM in control.timezone.", key="from")
    to: str = setting(doc="When it ends, HH:MM; earlier than from means the next day (22:00 to 06:00).")
    min: int = setting(doc="Replicas kept running during the window, instead of scaling.min.")
    max: int | None = setting(None, doc="The most replicas during the window; unset: scaling.max.")
    days: list[str] = setting(
        factory=lambda: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
        doc="The days it begins on: mon to sun, or ranges such as mon-fri.",
    )


@attrs.frozen
class ModelSlo:
    """The latency a model is meant to keep, published as llmgw_model_slo_seconds for alerts to compare with."""

    ttft_p99: Duration = setting(
        Duration(seconds=0),
        doc="Time to the first token 99% of streamed requests should beat; 0 sets none. While the last 60 s "
            "are over it, the lowest bands are refused (503 slo_exceeded) and a replica more is started.",
    )
    tpot_p99: Duration = setting(
        Duration(seconds=0), doc="Time per output token 99% of streamed requests should beat; 0 sets none."
    )


@attrs.frozen
class Scaling:
    """How many replicas of a model run."""

    min: int = setting(1, doc="Replicas kept running at all times.")
    max: int = setting(1, doc="Most replicas run when demand is high.")
    on_demand: bool = setting(
        False,
        doc="Start the first replica when a request arrives, and stop the last when idle; min must be 0.",
    )
    idle_timeout: Duration = setting(
        Duration(minutes=30), doc="A replica above min with no requests for this long is stopped."
    )
    schedule: list[ScalingWindow] = setting(
        factory=list, doc="Windows of the week with their own min (and max); outside them, min and max apply."
    )
    prewarm: Duration = setting(
        Duration(seconds=0), doc="Start a window's replicas this long before it begins, so they are ready on time."
    )


ModelRole = Literal["model", "guard"]


@attrs.frozen
class Capabilities:
    """What a model can take besides text; a guard policy with require_capabilities reads it."""

    tools: bool = setting(False, doc="The model calls tools (function calling).")
    vision: bool = setting(False, doc="The model reads images in messages.")


@attrs.frozen
class JudgeSpec:
    """How the guardrails ask a model with role guard."""

    format: str = setting(
        "json", doc="How to ask it and read its verdict: qwen3guard, llamaguard3, shieldgemma, json, or a plugin's."
    )
    categories: list[str] = setting(
        factory=list,
        doc="Llama Guard: names for S1, S2, ... in order; ShieldGemma: the principles asked, one sentence each.",
    )


@attrs.frozen
class AdapterConfig:
    """A LoRA adapter served beside its base model, asked for as BASE:NAME or by its own name."""

    name: str = setting(doc="The adapter's name: clients ask for BASE:NAME or NAME; unique in the catalog.")
    source: str = setting(doc="Where its file comes from, as a model's source: a path on the mirror, a URL or a registry.")
    sha256: str = setting("", doc="The file's SHA-256 the node checks after fetching it; empty checks none.")
    scale: float = setting(1.0, doc="How strongly it is applied (llama.cpp's scale); 1 applies it as trained.")


@attrs.frozen
class ModelConfig:
    """A model in the catalog: run on the cluster (profiles) or forwarded to a provider (endpoints)."""

    name: str = setting(doc="The name clients ask for.")
    aliases: list[str] = setting(factory=list, doc="Other names clients may use for the same model.")
    source: str = setting(
        "", doc="Where the weights come from: a Hugging Face repository, a URL, or a path on the mirror."
    )
    engine: str = setting("", doc="The engine of every profile that names none.")
    engine_version: str = setting(
        "", doc="The engine version it must run on, like 0.9.1 (vLLM); placement uses only nodes that have it or "
                "whose agent can install it. Empty: whatever version the node has.",
    )
    endpoints: list[Endpoint] = setting(
        factory=list, doc="Providers serving this model outside the cluster, tried in order."
    )
    fallbacks: list[str] = setting(factory=list, doc="Models tried, in order, when this one has no capacity.")
    concurrency: int = setting(
        64,
        doc="Requests sent to one replica of this model at once; more wait in the admission queue.",
    )
    price: Price | None = setting(None, doc="What this model costs; empty uses prices.default.")
    profiles: list[Profile] = setting(
        factory=list, doc="Ways to run it on the cluster, in order of preference."
    )
    scaling: Scaling = section(Scaling, doc="How many replicas run.")
    slo: ModelSlo = section(ModelSlo, doc="The latency it is meant to keep (llmgw_model_slo_seconds).")
    class_: ModelClass = setting(
        "standard",
        key="class",
        doc="critical models are never stopped for others; opportunistic ones give way first.",
    )
    owner: str = setting(
        "", doc=("The organization, team or project it belongs to, like team:acme/ml: its replicas count "
                 "against that scope's capacity quota and those above it; shown in the catalog.")
    )
    capabilities: Capabilities = section(Capabilities, doc="What it takes besides text.")
    role: ModelRole = setting(
        "model",
        doc="model serves clients; guard makes it the guardrails' judge, hidden from clients and refused to every key.",
    )
    guard: JudgeSpec = section(JudgeSpec, doc="How a judge (role guard) is asked.")
    adapters: list[AdapterConfig] = setting(
        factory=list, doc="LoRA adapters its replicas serve beside it (docs/adapters.md)."
    )
    max_adapters: int = setting(
        0, doc="Adapters one replica holds at once, loaded on first request (vLLM, sim); 0 loads every adapter at start."
    )


@attrs.frozen
class BackupConfig:
    """Backups of the store and the configuration (llmgw server backup, the admin API, the console)."""

    dir: str = setting(
        "",
        doc="The folder archives are written to (created mode 0700); empty is a backups folder beside a SQLite "
        "store's file, or /var/lib/llmgw/backups with PostgreSQL.",
    )
    keep: int = setting(
        7, doc="Archives kept in that folder; older ones are removed after each backup; 0 keeps every one."
    )
    encrypt_to: list[str] = setting(  # llmgw.backup.seal
        factory=list,
        doc="age recipients archives are encrypted to (age1… keys, or ssh-ed25519/ssh-rsa public keys); only "
        "their private keys can read an archive (llmgw server backup keygen makes one).",
    )
    passphrase_file: str = setting(  # llmgw.backup.seal
        "", doc="A file holding a passphrase archives are encrypted with instead (age's scrypt mode); not with "
        "encrypt_to.",
    )
    copy_to: list[str] = setting(  # llmgw.backup.copies
        factory=list,
        doc="Where each archive is copied after it is verified, each keeping backup.keep: a folder "
        "(/mnt/backups), ssh://user@host[:port]/path (the system's ssh), or s3://bucket/prefix.",
    )
    ssh_identity_file: str = setting(  # llmgw.backup.copies
        "", doc="The private key ssh uses for ssh:// copies; empty uses ssh's own (~/.ssh, the agent)."
    )
    ssh_known_hosts_file: str = setting(  # llmgw.backup.copies
        "", doc="The known_hosts file ssh checks ssh:// destinations' host keys against; empty uses ssh's own."
    )
    s3_endpoint: str = setting(  # llmgw.backup.s3
        "", doc="The S3-compatible endpoint of s3:// copies, like https://s3.eu-central-1.amazonaws.com or "
        "http://minio:9000 (buckets addressed by path)."
    )
    s3_region: str = setting("us-east-1", doc="The region s3:// requests are signed for.")  # llmgw.backup.s3
    s3_credentials_file: str = setting(  # llmgw.backup.s3
        "", doc="An AWS-style credentials file ([default] aws_access_key_id, aws_secret_access_key) for s3:// "
        "copies."
    )
    schedule: str = setting(  # llmgw.backup.schedule
        "", doc="When the running server backs up by itself: an interval (6h, 30m) or a daily UTC time (02:30); "
        "empty makes none.",
    )


@attrs.frozen
class TracingConfig:
    """OpenTelemetry traces of client requests, sent over OTLP/HTTP; off while endpoint is empty."""

    endpoint: str = setting(
        "", doc=("The collector's OTLP/HTTP address, like http://collector:4318 (/v1/traces is added when "
                 "no path is given); empty traces nothing and costs nothing.")
    )
    sample_ratio: float = setting(
        1.0, doc=("Share of new traces kept, from 0 to 1; a request that arrives with a traceparent "
                  "follows its caller's choice.")
    )
    service_name: str = setting("llmgw", doc="The service.name the spans carry.")
    headers: dict[str, Secret] = setting(
        factory=dict, doc="Headers sent with every export, like a collector's key; each value may be env:NAME or file:/path."
    )
    timeout: Duration = setting(Duration(seconds=10), doc="Longest one export to the collector may take.")


@attrs.frozen
class BudgetsConfig:
    """When budgets tell someone (notify's budget_spent event and llmgw_budget_events_total)."""

    notify_at: list[float] = setting(
        factory=list, doc=("Shares of a budget (above 0, below 1, like 0.8) whose crossing is told once per "
                           "budget period, besides the refusal when it runs out.")
    )


@attrs.frozen
class FederationPeer:
    """Another llmgw cluster whose models this one lists as PEER/MODEL and forwards to (federation)."""

    name: str = setting(doc="The peer's name, the PEER of PEER/MODEL: letters, digits, . _ -, no slash.")
    url: str = setting(doc="The peer gateway's client API, like https://llm.other-site.example:8080.")
    api_key: Secret = setting(
        doc="A key the peer issued to this cluster; env:NAME or file:/path keeps it out of this file."
    )


@attrs.frozen
class FederationConfig:
    """Other llmgw clusters as providers: their models listed here, requests forwarded with their keys."""

    cluster_id: str = setting(
        "", doc="This cluster's name in the x-llmgw-hop header it sends peers; empty is the machine's host name."
    )
    sync_interval: Duration = setting(
        Duration(seconds=30), doc="How often each peer's /v1/models is read again; a failed read marks it down."
    )
    peers: list[FederationPeer] = setting(factory=list, doc="The clusters this one forwards to.")


@attrs.frozen
class LimitsConfig:
    """Where RPM, TPM and budget holds are counted: this process's memory, or a Redis several processes share."""

    store: str = setting(
        "memory",
        doc="memory counts in this process alone; redis://HOST:PORT/DB (rediss:// for TLS) counts in that Redis, "
            "exactly across every worker and gateway using it (its password in password_file, not here).",
    )
    password_file: str = setting("", doc="A file holding the Redis password (AUTH), when the address has none.")
    ca_file: str = setting("", doc="The CA that signed the Redis server's certificate (rediss://); empty: the system's.")
    on_store_down: Literal["refuse", "local"] = setting(
        "refuse",
        doc="When the Redis cannot be reached: refuse answers 503 with the reason; local counts in this process's "
            "memory until it is back (llmgw_limits_store_up 0, llmgw_limits_local_total).",
    )
    timeout: Duration = setting(
        Duration(seconds=1), doc="Longest an admission waits for the Redis (or a new connection to it) before it "
                                 "counts as down."
    )
    hold_ttl: Duration = setting(
        Duration(minutes=35),
        doc="How long a budget hold lives in the Redis when its gateway never releases it (a crash); longer than "
            "router.timeouts.total.",
    )

    @property
    def shared(self) -> bool:
        """True when the limits are counted in a Redis."""
        return self.store.startswith(("redis://", "rediss://", "unix://"))


@attrs.frozen
class ServerConfig:
    """server.yaml: one control plane's listeners, certificates and store, and the cluster's settings."""

    listen: str = setting(
        ":8080",
        doc="The client API (OpenAI- and Anthropic-compatible), as host:port; an empty host is every interface.",
    )
    admin_listen: str = setting(
        "127.0.0.1:9090",
        doc="The admin API (llmgw ctl, the console); keep it on loopback and reach it through ssh.",
    )
    admin_remote: bool = setting(
        False,
        doc="Allow admin_listen on an address other than loopback; the token then crosses the network in clear.",
    )
    admin_token_file: str = setting(
        "/var/lib/llmgw/admin-token",
        doc="The admin API's bearer token, written (mode 0600) the first time the server starts.",
    )
    metrics_listen: str = setting(":9091", doc="Prometheus metrics and nothing else; empty serves none.")
    agent_listen: str = setting(":7443", doc="Where node agents connect, with mutual TLS.")
    agent_advertise: str = setting(
        "",
        doc="The HOST:PORT agents and the other control planes are told to reach agent_listen at; empty is "
        "agent_listen's host, or this machine's name for every interface. LLMGW_AGENT_ADVERTISE, when set, "
        "is used instead.",
    )
    agent_insecure: bool = setting(
        False,
        doc="Accept agents without TLS, so anyone who reaches the port can claim to be any node; for one machine or a test.",
    )
    agent_tls: ServerTLS = section(
        ServerTLS, doc="The agent port's certificate, and the authority agents' certificates must come from."
    )
    store: StoreConfig = section(StoreConfig, doc="Where users, keys, usage and the catalog are kept.")
    backup: BackupConfig = section(BackupConfig, doc="Where backup archives go and how many are kept.")
    auth: AuthConfig = section(AuthConfig, doc="Who may use the client API and the portal.")
    mail: MailConfig = section(MailConfig, doc="The SMTP server the portal's mail goes through; none while host is empty.")
    router: RouterConfig = section(RouterConfig, doc="How client requests reach a replica and come back.")
    admission: AdmissionConfig = section(
        AdmissionConfig, doc="Queueing requests while every replica of a model is busy."
    )
    accounting: AccountingConfig = section(AccountingConfig, doc="Recording each request's usage.")
    limits: LimitsConfig = section(
        LimitsConfig, doc="Where RPM, TPM and budget holds are counted (shared limits, docs/scaling.md)."
    )
    workers: int = setting(
        1, doc="Processes serving the client API on listen's one port; more than 1 needs limits.store on a Redis."
    )
    control: ControlConfig = section(ControlConfig, doc="The scheduler: which replicas run on which nodes.")
    facility: FacilityConfig = section(
        FacilityConfig, doc="Racks, PDUs and their power budgets, which placement keeps within."
    )
    mirror: MirrorConfig = section(MirrorConfig, doc="Where nodes fetch model files from.")
    guard: GuardConfig = section(
        GuardConfig, doc="Guardrails: checks on what goes to models and what comes back."
    )
    notify: NotifyConfig = section(NotifyConfig, doc="Where events that need a person are sent.")
    prices: PricesConfig = section(PricesConfig, doc="What usage costs, for budgets and reports.")
    budgets: BudgetsConfig = section(BudgetsConfig, doc="When a budget running low or out is told.")
    tracing: TracingConfig = section(TracingConfig, doc="Traces of client requests, sent to an OpenTelemetry collector.")
    federation: FederationConfig = section(
        FederationConfig, doc="Other llmgw clusters whose models this one serves as PEER/MODEL."
    )
    releases: ReleasesConfig = section(ReleasesConfig, doc="The keys signed releases must be signed by.")
    models: list[ModelConfig] = setting(factory=list, doc="The models this file declares.")

    def model(self, name: str) -> ModelConfig | None:
        """The model called `name` or having it as an alias, if the file declares one."""
        for model in self.models:
            if model.name == name or name in model.aliases:
                return model
        return None
