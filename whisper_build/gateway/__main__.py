"""``python -m whisper_build.gateway``: serve with settings from ``WHISPER_GATEWAY_*``."""

from whisper_build.gateway.serve import main

main()
