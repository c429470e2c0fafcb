"""The serving path's stages, in order (llmgw.router.pipeline runs them).

Each is a module of its own and implements `Stage` (llmgw.router.stages.base): `enter(turn)` on the
way in, `leave(turn)` on the way out, in the reverse order, for every stage entered. Accounting is the
outermost, so it records every request however it ended; the engine the innermost, the one that
answers. What a stage leaves for a later one (the body, the model, the hold, the grants) is on the
`Turn`; the request's record, which becomes its usage row, is `turn.call`.
"""

from __future__ import annotations

from llmgw.router.stages.accounting import AccountingStage
from llmgw.router.stages.admission import AdmissionStage
from llmgw.router.stages.auth import AuthStage
from llmgw.router.stages.base import Call, Stage, Turn
from llmgw.router.stages.cache import CacheStage
from llmgw.router.stages.engine import EngineStage
from llmgw.router.stages.guard import GuardStage
from llmgw.router.stages.kept import KeptStage
from llmgw.router.stages.limits import LimitsStage
from llmgw.router.stages.threads import ThreadsStage

#: The serving path, outermost first.
STAGES: tuple[Stage, ...] = (AccountingStage(), AuthStage(), ThreadsStage(), LimitsStage(), GuardStage(),
                             CacheStage(), KeptStage(), AdmissionStage(), EngineStage())

__all__ = ["STAGES", "Call", "Stage", "Turn"]
