"""The Grace-GPU C2C link (GH200, GB200) as NVML's field values give it (drivers 525+), apart from the
adapter's other readings: the link count, then each link's status, speed and back-to-back replays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# NVML_FI_DEV_C2C_LINK_COUNT, _GET_STATUS, _GET_MAX_BW (MB/s), _ERROR_REPLAY_B2B; the last three per link (scope)
FIELD_C2C_COUNT, FIELD_C2C_STATUS, FIELD_C2C_MBPS, FIELD_C2C_REPLAY_B2B = 170, 171, 172, 233
Unread = dict[str, dict[str, str]]
ReadField = Callable[[int | tuple[int, int], Unread], int | None]  # one field value, its failure into the dict


def c2c_links(read: ReadField, unread: Unread) -> dict[str, Any]:
    """Each link's state and speed (MB/s) and back-to-back replay errors; {"not_read": why} where the GPU or
    its driver does not answer (no C2C there, or a driver before 525). A lost or failed read is recorded in
    `unread`, like every other reading of the GPU; an absent one (NOT_SUPPORTED) is not."""
    tried: Unread = {}
    count = read(FIELD_C2C_COUNT, tried)
    links: list[dict[str, int | None]] = []
    for link in range(count or 0):
        state, mbps, b2b = (read((f, link), tried) for f in (FIELD_C2C_STATUS, FIELD_C2C_MBPS, FIELD_C2C_REPLAY_B2B))
        links.append({"active": state, "mbps": mbps, "replay_b2b": b2b})
    failed = tried.get("c2c")
    if failed is not None and failed["class"] != "absent":
        unread["c2c"] = failed
    if count is None or failed is not None:
        return {"not_read": failed["code"] if failed else "no answer"}
    return {"links": links}
