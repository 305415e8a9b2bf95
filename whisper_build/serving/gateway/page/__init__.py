"""The try-it page's files (package data, served by :mod:`whisper_build.serving.gateway.routes.page`).

``index.html`` (the document), ``page.css``, ``page.js`` (the Live, File and key logic) and
``pcm-worklet.js`` (an AudioWorklet: microphone → 24 kHz 16-bit PCM, the live session's
``audio/pcm``). Plain files, no build step. Docs: docs/gateway.md, "The page".
"""
