"""When CA last scaled up, deleted a node, or failed to: the times its scale-down cooldowns count
from (sigs-CA `pkg/core/static_autoscaler.go` lastScaleUpTime, lastScaleDownDeleteTime,
lastScaleDownFailTime). The scale-up phase sets the first and the last, the scale-down phase reads
all three and sets the last two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Activity:
    last_scale_up: float = -math.inf
    last_delete: float = -math.inf
    last_failure: float = -math.inf
