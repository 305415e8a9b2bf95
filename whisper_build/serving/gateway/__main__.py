"""``python -m whisper_build.serving.gateway``: serve with settings from ``WHISPER_GATEWAY_*``."""

from whisper_build.serving.gateway.serve import main

main()
