"""``python -m whisper_build.serving.gateway``: serve with settings from ``WHISPER_GATEWAY_*``."""

from whisper_build.serving.gateway.serve import main

if __name__ == "__main__":  # not when a spawned worker process imports this module as __mp_main__
    main()
