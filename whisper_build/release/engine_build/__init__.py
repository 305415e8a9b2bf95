"""Engine build tool: ``python -m whisper_build.release.engine_build --help`` (docs/engines.md).

Builds TensorRT-LLM encoder and decoder engines for one Whisper model on the GPU it runs on,
smoke-tests them, lays out the Triton model repository and writes ``manifest.json``
(``docs/contracts.md`` §4); with ``--publish-bucket`` it also publishes the version to S3.

Modules, one concern each: :mod:`.spec` (the build's inputs), :mod:`.commands` (``convert_checkpoint.py``
/ ``trtllm-build`` argv), :mod:`.gpu` (``nvidia-smi`` parsing, runtime versions), :mod:`.memory` (windows
per batch for a GPU's memory), :mod:`.trtllm_support` (TensorRT-LLM releases with the engine builder),
:mod:`.layout` (the model repository), :mod:`.smoke` (the smoke-test verdict), :mod:`.cli` (orchestration).
"""
