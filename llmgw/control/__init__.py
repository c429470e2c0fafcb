"""The control plane: inventory, catalog, placement, reconciler, leadership, and the service joining them.

- `inventory`: nodes as their agents report them; lost after the heartbeat window.
- `catalog`: models from server.yaml and the store, checked; add, remove, scale.
- `placement`: filter then order, every rejection in words; preemption by class.
- `reconciler`: starts and stops replicas to meet each model's wants; feeds the router.
- `jobs`: each change to a model followed, fed by the reconciler, until it serves or fails.
- `leader`: the lease in the store; one leader, standbys take over.
- `service`: `ControlPlane`, and `install_control_plane(app, config, replicas)` for the server.

docs/control-plane.md and docs/placement.md are the operator's side.
"""

from llmgw.control.catalog import Catalog, CatalogError, CatalogModel, UnknownModel
from llmgw.control.inventory import Inventory, Node
from llmgw.control.placement import Decision, Holding, Placement, Rejection, place
from llmgw.control.state import ModelUnavailable

__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogModel",
    "Decision",
    "Holding",
    "Inventory",
    "ModelUnavailable",
    "Node",
    "Placement",
    "Rejection",
    "UnknownModel",
    "place",
]
