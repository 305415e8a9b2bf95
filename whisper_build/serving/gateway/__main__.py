"""``python -m whisper_build.serving.gateway``: serve with settings from ``WHISPER_GATEWAY_*``.

With ``WHISPER_GATEWAY_WORKERS`` = 1 this process serves
(:func:`whisper_build.serving.gateway.serve.serve`); with more, it supervises that many worker
processes (:func:`whisper_build.serving.gateway.workers.run_workers`).
Docs: docs/serving.md, "Gateway worker processes (`WHISPER_GATEWAY_WORKERS`)".
"""

from __future__ import annotations

from whisper_build.serving.gateway.serve import load_settings, serve
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.gateway.workers import run_workers


def main(settings: GatewaySettings | None = None) -> None:
    """Serve until SIGTERM/SIGINT; exits with the workers' status when there are several.

    Exits with status 2 when a ``WHISPER_GATEWAY_*`` variable is invalid.
    """
    settings = settings or load_settings()
    if settings.server.workers > 1:
        raise SystemExit(run_workers(settings))
    serve(settings)


if __name__ == "__main__":  # not when a spawned worker process imports this module as __mp_main__
    main()
