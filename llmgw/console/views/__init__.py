"""The entries of the sidebar, one thin view each, in their groups and in the order they are listed."""

from llmgw.console.views.do import AddNodeView, BackUpView, LeaveView, NotifyTestView, RestartAllView
from llmgw.console.views.fleet import GpusView, LogsView, NodesView, OverviewView, ReplicasView
from llmgw.console.views.jobs import JobsView
from llmgw.console.views.manual import ManualView
from llmgw.console.views.models import ModelsView
from llmgw.console.views.orgs import OrgsView
from llmgw.console.views.people import AccountsView, AuditView, KeysView
from llmgw.console.views.replicate import ReplicateView
from llmgw.console.views.settings import SettingsView
from llmgw.console.views.upgrade import UpgradeView
from llmgw.console.views.usage import QuotasView, UsageView

GROUPS = (
    ("Watch", (OverviewView, NodesView, GpusView, ModelsView, ReplicasView, UsageView, QuotasView, JobsView,
               LogsView)),
    ("People", (AccountsView, KeysView, OrgsView, AuditView)),
    ("Help", (ManualView,)),
    ("Settings", (SettingsView,)),
    ("Do", (AddNodeView, RestartAllView, UpgradeView, BackUpView, ReplicateView, NotifyTestView, LeaveView)),
)

__all__ = ["GROUPS"]
