"""Settings grouped by concern that keep one flat environment variable per field.

A settings class holds a group per concern (``GatewaySettings.health``, ``WorkerSettings.queue``, …);
each group is a ``BaseSettings`` with the parent's ``env_prefix``, so its field ``canary_timeout_seconds``
still reads ``WHISPER_GATEWAY_CANARY_TIMEOUT_SECONDS``, and a bad value is named by that field alone.
:func:`route_flat_names` lets the parent take a group's field by its flat name as well
(``GatewaySettings(capacity=2)``), as the environment does. Docs: docs/gateway.md, "Settings".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic_settings import BaseSettings


def route_flat_names(data: Any, groups: Mapping[str, type[BaseSettings]]) -> Any:
    """``data`` (a parent's input) with each group's flat names moved into that group, built from them.

    A group named in ``data`` by its flat fields is built as ``Group(**fields)``, so the environment
    fills its other fields; a group given whole (an instance or a dict) is kept, with flat names
    given beside it taking precedence. Any other input is returned as it is.
    """
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for group, group_cls in groups.items():
        flat = {name: data.pop(name) for name in list(data) if name in group_cls.model_fields}
        given = data.get(group)
        if isinstance(given, BaseSettings):
            if flat:
                data[group] = given.model_copy(update=flat)
            continue
        if isinstance(given, dict):
            flat = {**given, **flat}
        if flat:
            data[group] = group_cls(**flat)
    return data
