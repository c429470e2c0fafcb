"""The admin API's one route table: what is served, and what the OpenAPI document says.

Every endpoint is one `Route` below: method, path, handler, the attrs types
it reads (query, body) and answers, its summary, and for a change the audit
log's action and target. `register(app)` serves exactly these;
`openapi_document()` describes exactly these. Tests fail when the two
disagree, or when docs/admin-api.openapi.json is not what this table makes
(regenerate it with `llmgw ctl openapi > docs/admin-api.openapi.json`).
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from llmgw.admin import handlers_backup as hb
from llmgw.admin import handlers_cluster as hc
from llmgw.admin import handlers_data as hd
from llmgw.admin import handlers_mail as hm
from llmgw.admin import handlers_engines as he
from llmgw.admin import handlers_facility as hf
from llmgw.admin import handlers_federation as hfed
from llmgw.admin import handlers_join as hj
from llmgw.admin import handlers_kept as hk  # kept requests
from llmgw.admin import handlers_logs as hl
from llmgw.admin import handlers_notify as hn
from llmgw.admin import handlers_ops as ho
from llmgw.admin import handlers_people as hp
from llmgw.admin import handlers_rollout as hr
from llmgw.admin import handlers_storage as hst
from llmgw.admin import handlers_usage as hu
from llmgw.admin import handlers_upgrade as hup  # ctl upgrade
from llmgw.admin import handlers_releases as hrel  # the mirror's releases, for upgrades
from llmgw.admin import server_config as hs
from llmgw.admin.api_types import (
    AuditList,
    AuditQuery,
    Done,
    Quota,
    QuotaList,
    QuotaSet,
    ScopeQuery,
    SettingHistory,
    SettingHistoryQuery,
    SettingInfo,
    SettingList,
    SettingValue,
    Summary,
    UsageExportQuery,
    UsageQuery,
    UsageReport,
)
from llmgw.admin.cluster_types import (
    JobInfo,
    JobList,
    JobQuery,
    ModelAddOptions,
    ModelDetail,
    ModelList,
    ModelUpdateList,
    NodeInfo,
    NodeLabels,
    NodeList,
    NodeLog,
    NodeLogQuery,
    NodeReason,
    PlacementExplanation,
    ReplicaList,
    RestartRequest,
    RestartResult,
    ScaleChange,
)
from llmgw.admin.backup_types import BackupList, BackupMade
from llmgw.admin.rollout_types import (
    CanaryInfo,
    CanaryList,
    CanaryStart,
    CanaryWeight,
    EvalRequest,
    EvalResult,
    PromoteRequest,
    ServeRequest,
    UpdateRequest,
)
from llmgw.admin.mail_types import MailList, MailQuery
from llmgw.admin.kept_types import KeepQuery, KeepSet, KeepSetting, KeptDetail, KeptList, KeptQuery, ReplayRequest, \
    ReplayResult  # kept requests
from llmgw.admin.data_types import (
    ForgetResult,
    KeyLifetime,
    KeyLifetimeQuery,
    KeyLifetimeSet,
    Residency,
    ResidencyQuery,
    ResidencySet,
    Routing,
    RoutingQuery,
    RoutingSet,
    UserForget,
)
from llmgw.admin.facility_types import DOMAIN_PATTERN, FacilityHold, FacilityReport, HoldCreate
from llmgw.admin.engine_types import EngineInstallRequest, EngineInstallStarted, EngineList, EngineQuery
from llmgw.admin.join_types import JoinCodeCreate, JoinCodeInfo, JoinCodeIssued, JoinCodeList
from llmgw.admin.notify_types import NotifyTestRequest, NotifyTestResult
from llmgw.admin.storage_types import StorageQuota, StorageQuotaQuery, StorageQuotaSet
from llmgw.admin import forms
from llmgw.admin.dispatch import PREFIX, Route, make_endpoint
from llmgw.admin.forms import Param
from llmgw.admin.settings import SETTING_KEYS
from llmgw.admin.openapi import build_document
from llmgw.admin.server_config_types import ServerConfigEdit, ServerConfigInfo, ServerConfigSaved
from llmgw.admin.people_types import (
    IssuedKey,
    KeyCreate,
    KeyInfo,
    KeyList,
    KeyQuery,
    KeyRotate,
    LimitsInfo,
    LimitsSet,
    MemberAdd,
    MemberPathQuery,
    MembershipInfo,
    OrgCreate,
    OrgNode,
    OrgPathQuery,
    OrgTree,
    RotatedKey,
    UserCreate,
    UserDetail,
    UserInfo,
    UserList,
    UserQuery,
    UserRole,
    UserState,
)
from llmgw.config.server import ModelConfig

__all__ = ["PREFIX", "ROUTES", "TAGS", "openapi_document", "openapi_text", "register"]

TAGS = (
    ("cluster", "The fleet: nodes, models, replicas and placement (needs the scheduler)."),
    ("usage", "Requests, tokens and cost, summed; CSV export."),
    ("quotas", "Capacity quotas: GPUs, cores and memory per organization, team or project."),
    ("settings", "Cluster settings changed at run time, over server.yaml, with their history."),
    ("audit", "Every change, who made it, through what and how it ended."),
    ("people", "Organizations, teams, projects, people, keys and limits."),
    ("backups", "Archives of the store and the configuration, made on this control plane."),
    ("notify", "Notifications: events that need a person, sent to server.yaml's notify.sinks."),
    ("federation", "Other llmgw clusters whose models this one serves as PEER/MODEL (server.yaml's federation.peers)."),
    ("meta", "This API's own description."),
)

NODE = {"node": "The node's id."}
MODEL = {"name": "The model's name or one of its aliases."}
KEY = {"key": Param("The setting's key, like router.retries.attempts.", {"enum": list(SETTING_KEYS)})}
USER = {"user": Param("The person's email or id.", forms.PERSON)}
APIKEY = {"key": Param("The key's id (key-…) or its prefix.", forms.ID)}
JOB = {"job": "The job's id, like job-3f9a1c."}
KEPT = {"id": Param("The kept request's id, like req_3f9a1c… (GET /requests lists them).", forms.ID)}  # kept requests
REPLICA = {"replica": "The replica's id, like qwen-small-3f9a1c2e (`GET /replicas` lists them)."}

ROUTES: tuple[Route, ...] = (
    # ---- cluster
    Route(method="GET", path="/summary", handler=hc.get_summary, tag="cluster", response=Summary,
          summary="The fleet at a glance"),
    Route(method="GET", path="/nodes", handler=hc.list_nodes, tag="cluster", response=NodeList,
          summary="List nodes"),
    Route(method="POST", path="/nodes/join-codes", handler=hj.create_join_code, tag="cluster",
          response=JoinCodeIssued, request=JoinCodeCreate, status=201, action="nodes.join-code",
          target="join-code:new", summary="Make a join code for a machine to join with"),
    Route(method="GET", path="/nodes/join-codes", handler=hj.list_join_codes, tag="cluster",
          response=JoinCodeList, summary="List the join codes that still work"),
    Route(method="DELETE", path="/nodes/join-codes/{code}", handler=hj.revoke_join_code, tag="cluster",
          response=JoinCodeInfo, params={"code": "The join code's id."}, action="nodes.join-code-revoke",
          target="join-code:{code}", summary="Revoke a join code"),
    Route(method="GET", path="/nodes/{node}", handler=hc.get_node, tag="cluster", response=NodeInfo,
          params=NODE, summary="Show a node"),
    Route(method="POST", path="/nodes/{node}/cordon", handler=hc.cordon_node, tag="cluster", response=NodeInfo,
          request=NodeReason, params=NODE, action="nodes.cordon", target="node:{node}", summary="Cordon a node"),
    Route(method="POST", path="/nodes/{node}/uncordon", handler=hc.uncordon_node, tag="cluster",
          response=NodeInfo, params=NODE, action="nodes.uncordon", target="node:{node}",
          summary="Uncordon a node"),
    Route(method="POST", path="/nodes/{node}/drain", handler=hc.drain_node, tag="cluster", response=NodeInfo,
          request=NodeReason, params=NODE, action="nodes.drain", target="node:{node}", summary="Drain a node"),
    Route(method="DELETE", path="/nodes/{node}", handler=hc.remove_node, tag="cluster", response=NodeInfo,
          params=NODE, action="nodes.remove", target="node:{node}", summary="Remove a node from the cluster"),
    Route(method="PATCH", path="/nodes/{node}/labels", handler=hc.set_node_labels, tag="cluster",
          response=NodeInfo, request=NodeLabels, params=NODE, action="nodes.labels", target="node:{node}",
          summary="Set or take off a node's labels"),
    Route(method="GET", path="/facility", handler=hf.get_facility, tag="cluster", response=FacilityReport,
          summary="Racks, PDUs and their power, and the holds"),
    Route(method="POST", path="/facility/holds", handler=hf.create_hold, tag="cluster", response=FacilityHold,
          request=HoldCreate, status=201, action="facility.hold", target="domain:{domain}",
          summary="Keep a node, rack, PDU or card free"),
    Route(method="DELETE", path="/facility/holds/{domain}", handler=hf.delete_hold, tag="cluster",
          response=FacilityHold, params={"domain": Param("The held domain, like rack:r12-07 or card:gpu01:3.",
                                                          {"pattern": DOMAIN_PATTERN})},
          action="facility.release", target="domain:{domain}", summary="Release a hold"),
    Route(method="GET", path="/nodes/{node}/logs", handler=hl.get_node_logs, tag="cluster", response=NodeLog,
          query=NodeLogQuery, params=NODE, summary="Read a node's agent log, or a replica's engine log"),
    Route(method="GET", path="/engines", handler=he.list_engines, tag="cluster", response=EngineList,
          query=EngineQuery, summary="List every node's engines: installed, being installed, failed"),
    Route(method="POST", path="/nodes/{node}/engines", handler=he.install_engine, tag="cluster",
          response=EngineInstallStarted, request=EngineInstallRequest, params=NODE, status=202,
          action="nodes.engine-install", target="node:{node}", summary="Have a node install an engine"),
    Route(method="GET", path="/federation/peers", handler=hfed.list_federation_peers, tag="federation",
          response=hfed.FederationPeerList, summary="List the federation peers, whether each is up, and their models"),
    Route(method="GET", path="/models", handler=hc.list_models, tag="cluster", response=ModelList,
          summary="List the catalog"),
    Route(method="POST", path="/models", handler=hc.add_model, tag="cluster", response=ModelDetail,
          request=ModelConfig, raw_body=True, query=ModelAddOptions, status=201, action="models.add",
          target="model:{name}", summary="Add a model"),
    Route(method="GET", path="/models/{name}", handler=hc.get_model, tag="cluster", response=ModelDetail,
          params=MODEL, summary="Show a model, every default filled in"),
    Route(method="DELETE", path="/models/{name}", handler=hc.remove_model, tag="cluster", response=ModelDetail,
          params=MODEL, action="models.remove", target="model:{name}", summary="Remove a model"),
    Route(method="POST", path="/models/{name}/scale", handler=hc.scale_model, tag="cluster",
          response=ModelDetail, request=ScaleChange, params=MODEL, action="models.scale",
          target="model:{name}", summary="Scale a model"),
    Route(method="POST", path="/models/{name}/restart", handler=hc.restart_model, tag="cluster",
          response=RestartResult, request=RestartRequest, params=MODEL, action="models.restart",
          target="model:{name}", summary="Restart a model's replicas"),
    Route(method="POST", path="/models/{name}/retry", handler=hc.retry_model, tag="cluster",
          response=ModelDetail, params=MODEL, action="models.retry", target="model:{name}",
          summary="Start a parked model again now"),
    Route(method="GET", path="/models/{name}/placement", handler=hc.explain_placement, tag="cluster",
          response=PlacementExplanation, params=MODEL, summary="Explain a model's placement"),
    Route(method="POST", path="/models/{name}/update", handler=hr.update_model, tag="cluster", response=JobInfo,
          request=UpdateRequest, params=MODEL, status=202, action="models.update", target="model:{name}",
          summary="Move a model to a new revision"),
    Route(method="POST", path="/models/{name}/rollback", handler=hr.rollback_model, tag="cluster",
          response=JobInfo, params=MODEL, status=202, action="models.rollback", target="model:{name}",
          summary="Return a model to the revision it had"),
    Route(method="POST", path="/models/{name}/canary", handler=hr.start_canary, tag="cluster", response=JobInfo,
          request=CanaryStart, params=MODEL, status=202, action="models.canary", target="model:{name}",
          summary="Try a newer revision on a share of a model's sessions"),
    Route(method="PATCH", path="/models/{name}/canary", handler=hr.set_canary_weight, tag="cluster",
          response=CanaryInfo, request=CanaryWeight, params=MODEL, action="models.canary-weight",
          target="model:{name}", summary="Change a canary's share"),
    Route(method="POST", path="/models/{name}/canary/promote", handler=hr.promote_canary, tag="cluster",
          response=JobInfo, request=PromoteRequest, params=MODEL, status=202, action="models.promote",
          target="model:{name}", summary="Move a model to its canary's revision"),
    Route(method="DELETE", path="/models/{name}/canary", handler=hr.abort_canary, tag="cluster",
          response=CanaryInfo, params=MODEL, action="models.canary-abort", target="model:{name}",
          summary="Take a model's canary out"),
    Route(method="GET", path="/canaries", handler=hr.list_canaries, tag="cluster", response=CanaryList,
          summary="List canaries"),
    Route(method="POST", path="/models/{name}/eval", handler=hr.evaluate_model, tag="cluster",
          response=EvalResult, request=EvalRequest, params=MODEL, action="models.eval", target="model:{name}",
          summary="Ask a quality suite of a model"),
    Route(method="POST", path="/model-serve", handler=hr.serve_model, tag="cluster", response=JobInfo,
          request=ServeRequest, status=202, action="models.serve", target="model:?",
          summary="Serve a model from a repository or the mirror"),
    Route(method="POST", path="/upgrade", handler=hup.upgrade_cluster, tag="cluster", response=JobInfo,
          request=hup.UpgradeRequest, status=202, action="cluster.upgrade", target="cluster",
          summary="Upgrade the control planes, then every node's agent, to a signed release"),
    Route(method="GET", path="/releases", handler=hrel.list_releases, tag="cluster", response=hrel.ReleaseList,
          summary="List the mirror's releases, each checked against the trusted keys"),
    Route(method="GET", path="/model-updates", handler=hc.list_model_updates, tag="cluster",
          response=ModelUpdateList, summary="New files for served models"),
    Route(method="POST", path="/model-updates/check", handler=hc.check_model_updates, tag="cluster",
          response=ModelUpdateList, action="models.check-updates", target="models",
          summary="Check for new files now"),
    Route(method="GET", path="/replicas", handler=hc.list_replicas, tag="cluster", response=ReplicaList,
          summary="List replicas"),
    Route(method="POST", path="/replicas/{replica}/restart", handler=hc.restart_replica, tag="cluster",
          response=RestartResult, request=RestartRequest, params=REPLICA, action="replicas.restart",
          target="replica:{replica}", summary="Restart one replica"),
    Route(method="GET", path="/jobs", handler=hc.list_jobs, tag="cluster", response=JobList, query=JobQuery,
          summary="List jobs: models being served or changed"),
    Route(method="GET", path="/jobs/{job}", handler=hc.get_job, tag="cluster", response=JobInfo, params=JOB,
          summary="Show a job and its steps"),
    # ---- usage
    Route(method="GET", path="/usage", handler=hu.get_usage, tag="usage", response=UsageReport,
          query=UsageQuery, summary="Usage summed by group and period"),
    Route(method="GET", path="/usage/export", handler=hu.export_usage, tag="usage", response=None,
          content_type="text/csv", query=UsageExportQuery, summary="Usage as CSV"),
    # ---- quotas
    Route(method="GET", path="/quotas", handler=ho.list_quotas, tag="quotas", response=QuotaList,
          summary="List capacity quotas"),
    Route(method="PUT", path="/quotas", handler=ho.set_quota, tag="quotas", response=Quota, request=QuotaSet,
          action="quotas.set", target="{scope}", summary="Set a capacity quota"),
    Route(method="DELETE", path="/quotas", handler=ho.remove_quota, tag="quotas", response=Quota,
          query=ScopeQuery, action="quotas.remove", target="{scope}", summary="Remove a capacity quota"),
    # ---- settings
    Route(method="GET", path="/settings", handler=ho.list_settings, tag="settings", response=SettingList,
          summary="List cluster settings"),
    Route(method="GET", path="/settings/history", handler=ho.setting_history, tag="settings",
          response=SettingHistory, query=SettingHistoryQuery, summary="Settings' history"),
    Route(method="GET", path="/settings/{key}", handler=ho.get_setting, tag="settings", response=SettingInfo,
          params=KEY, summary="Show a setting"),
    Route(method="PUT", path="/settings/{key}", handler=ho.set_setting, tag="settings", response=SettingInfo,
          request=SettingValue, params=KEY, action="settings.set", target="setting:{key}",
          summary="Set a setting"),
    Route(method="DELETE", path="/settings/{key}", handler=ho.unset_setting, tag="settings",
          response=SettingInfo, params=KEY, action="settings.unset", target="setting:{key}",
          summary="Unset a setting (back to server.yaml's)"),
    Route(method="GET", path="/server-config", handler=hs.get_server_config, tag="settings",
          response=ServerConfigInfo, summary="Every key of this control plane's server.yaml"),
    Route(method="PUT", path="/server-config", handler=hs.put_server_config, tag="settings",
          response=ServerConfigSaved, request=ServerConfigEdit, raw_body=True, action="server-config.set",
          target="server-config", summary="Change keys of server.yaml, keeping its comments"),
    # ---- audit
    Route(method="GET", path="/audit", handler=ho.list_audit, tag="audit", response=AuditList, query=AuditQuery,
          summary="Read the audit log"),
    # ---- people
    Route(method="GET", path="/orgs", handler=hp.list_orgs, tag="people", response=OrgTree,
          summary="The organization tree"),
    Route(method="POST", path="/orgs", handler=hp.create_org, tag="people", response=OrgNode, request=OrgCreate,
          status=201, action="org.create", target="path:{path}", summary="Make an organization, team or project"),
    Route(method="DELETE", path="/orgs", handler=hp.remove_org, tag="people", response=OrgNode,
          query=OrgPathQuery, action="org.remove", target="path:{path}",
          summary="Remove an empty organization, team or project"),
    Route(method="GET", path="/users", handler=hp.list_users, tag="people", response=UserList, query=UserQuery,
          summary="List people"),
    Route(method="POST", path="/users", handler=hp.create_user, tag="people", response=UserInfo,
          request=UserCreate, status=201, action="users.create", target="user:{email}", summary="Add a person"),
    Route(method="GET", path="/users/{user}", handler=hp.get_user, tag="people", response=UserDetail,
          params=USER, summary="Show a person"),
    Route(method="POST", path="/users/{user}/state", handler=hp.set_user_state, tag="people", response=UserInfo,
          request=UserState, params=USER, action="users.state", target="user:{user}",
          summary="Suspend, reinstate or approve a person"),
    Route(method="POST", path="/users/{user}/role", handler=hp.set_user_role, tag="people", response=UserInfo,
          request=UserRole, params=USER, action="users.role", target="user:{user}",
          summary="Give a person a staff role"),
    Route(method="POST", path="/users/{user}/memberships", handler=hp.add_membership, tag="people",
          response=MembershipInfo, request=MemberAdd, params=USER, status=201, action="users.add-member",
          target="user:{user}", summary="Make a person a member"),
    Route(method="DELETE", path="/users/{user}/memberships", handler=hp.remove_membership, tag="people",
          response=Done, query=MemberPathQuery, params=USER, action="users.remove-member", target="user:{user}",
          summary="Take a person out of an organization, team or project"),
    Route(method="GET", path="/keys", handler=hp.list_keys, tag="people", response=KeyList, query=KeyQuery,
          summary="List keys"),
    Route(method="POST", path="/keys", handler=hp.create_key, tag="people", response=IssuedKey,
          request=KeyCreate, status=201, action="keys.create", target="key:new", summary="Issue a key"),
    Route(method="POST", path="/keys/{key}/revoke", handler=hp.revoke_key, tag="people", response=KeyInfo,
          params=APIKEY, action="keys.revoke", target="key:{key}", summary="Revoke a key"),
    Route(method="POST", path="/keys/{key}/rotate", handler=hp.rotate_key, tag="people", response=RotatedKey,
          request=KeyRotate, params=APIKEY, action="keys.rotate", target="key:{key}", summary="Rotate a key"),
    Route(method="GET", path="/limits", handler=hp.get_limits, tag="people", response=LimitsInfo,
          query=ScopeQuery, summary="Show the limits on a scope"),
    Route(method="PUT", path="/limits", handler=hp.set_limits, tag="people", response=LimitsInfo,
          request=LimitsSet, action="keys.limits", target="{scope}", summary="Change the limits on a scope"),
    Route(method="DELETE", path="/limits", handler=hp.clear_limits, tag="people", response=LimitsInfo,
          query=ScopeQuery, action="keys.limits-clear", target="{scope}", summary="Remove the limits on a scope"),
    Route(method="POST", path="/users/forget", handler=hd.forget_user, tag="people", response=ForgetResult,
          request=UserForget, action="users.forget", target="user:forgotten",
          summary="Forget a person (their usage kept under a pseudonym)"),
    Route(method="GET", path="/residency", handler=hd.get_residency, tag="people", response=Residency,
          query=ResidencyQuery, summary="Where a scope's requests may be served"),
    Route(method="PUT", path="/residency", handler=hd.set_residency, tag="people", response=Residency,
          request=ResidencySet, action="keys.residency", target="{scope}",
          summary="Keep a scope's requests on the cluster's own engines, or lift it"),
    Route(method="GET", path="/routing", handler=hd.get_routing, tag="people", response=Routing,  # routing profiles
          query=RoutingQuery, summary="The routing profile a scope sets, and the one in force"),
    Route(method="PUT", path="/routing", handler=hd.set_routing, tag="people", response=Routing,
          request=RoutingSet, action="keys.routing", target="{scope}",
          summary="Route a scope's keys by a routing profile, or remove its own"),
    Route(method="GET", path="/key-lifetime", handler=hd.get_key_lifetime, tag="people", response=KeyLifetime,
          query=KeyLifetimeQuery, summary="How long keys made in a scope may live"),
    Route(method="PUT", path="/key-lifetime", handler=hd.set_key_lifetime, tag="people", response=KeyLifetime,
          request=KeyLifetimeSet, action="keys.lifetime", target="path:{path}",
          summary="Cap how long keys made in a scope may live"),
    Route(method="GET", path="/mail", handler=hm.list_mail, tag="people", response=MailList, query=MailQuery,
          summary="The portal's mail queue"),
    Route(method="GET", path="/storage-quota", handler=hst.get_storage_quota, tag="people", response=StorageQuota,
          query=StorageQuotaQuery, summary="Show a project's storage quota and what it keeps"),
    Route(method="PUT", path="/storage-quota", handler=hst.set_storage_quota, tag="people", response=StorageQuota,
          request=StorageQuotaSet, action="keys.quota", target="project:{project}",
          summary="Change a project's storage quota"),
    # kept requests (llmgw.admin.handlers_kept)
    Route(method="GET", path="/kept-requests", handler=hk.get_kept_requests, tag="people", response=KeepSetting,
          query=KeepQuery, summary="Whether a key's or a project's requests are kept, and for how long"),
    Route(method="PUT", path="/kept-requests", handler=hk.set_kept_requests, tag="people", response=KeepSetting,
          request=KeepSet, action="keys.requests", target="{scope}",
          summary="Keep a key's or a project's requests for a time, or stop"),
    Route(method="GET", path="/requests", handler=hk.list_requests, tag="people", response=KeptList,
          query=KeptQuery, summary="List the kept requests (the read is audited)"),
    Route(method="GET", path="/requests/{id}", handler=hk.get_request, tag="people", response=KeptDetail,
          params=KEPT, summary="Show a kept request and its answer (the read is audited)"),
    Route(method="POST", path="/requests/{id}/replay", handler=hk.replay_request, tag="people",
          response=ReplayResult, request=ReplayRequest, params=KEPT, action="requests.replay",
          target="request:{id}", summary="Send a kept request again to another model"),
    # ---- backups
    Route(method="GET", path="/backups", handler=hb.list_backups, tag="backups", response=BackupList,
          summary="List the backup archives"),
    Route(method="POST", path="/backups", handler=hb.make_backup, tag="backups", response=BackupMade,
          status=201, action="backups.create", target="backup", summary="Back up now"),
    # ---- notify
    Route(method="POST", path="/notify/test", handler=hn.notify_test, tag="notify", response=NotifyTestResult,
          request=NotifyTestRequest, action="notify.test", target="notify",
          summary="Send a test notification to each sink"),
    # ---- meta
    Route(method="GET", path="/openapi.json", handler=ho.get_openapi, tag="meta", response=None,
          summary="This API in OpenAPI 3.1"),
)


def register(app: web.Application, routes: tuple[Route, ...] = ROUTES) -> None:
    """Serve every route of the table on `app`, and nothing else."""
    app.router.add_routes([web.route(r.method, r.full_path, make_endpoint(r)) for r in routes])


@functools.cache
def _document() -> dict[str, Any]:
    return build_document(ROUTES, TAGS)


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of ROUTES (built once per process)."""
    return _document()


def openapi_text() -> str:
    """The document as committed in docs/admin-api.openapi.json: sorted keys, two spaces, a final newline."""
    import json

    return json.dumps(openapi_document(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"
