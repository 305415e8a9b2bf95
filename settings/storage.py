"""S3 layout of the model bucket (``docs/contracts.md`` §3).

Every pod of one GPU architecture mounts ``models/<model>/<gpu_arch>/`` through Mountpoint for
S3; the pointer ``current.json`` in that prefix names the version folder Triton serves. A new
engine is uploaded under a fresh version prefix and becomes live with one ``PutObject`` of the
pointer, so a half-finished upload never changes what running pods see. Pods of a
``serving_engine: torch`` group mount ``models/<model>/hf/`` instead: one Hugging Face checkpoint
for every GPU type, nothing built per architecture.
"""

MODELS_ROOT = "models/"
"""Key prefix of every engine in the model bucket (the Mountpoint role may read only below it)."""
POINTER_FILE = "current.json"
MANIFEST_FILE = "manifest.json"
MODEL_REPOSITORY_DIR = "model_repository"
CTRANSLATE2_DIR = "ctranslate2"
"""Folder, directly under the per-arch prefix, holding a CTranslate2 conversion of the model
(the ``serving_engine: ctranslate2`` fallback of a GPU group that has no TensorRT-LLM engine yet)."""
CTRANSLATE2_REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")
"""Files the fallback cannot load without: the CTranslate2 model and config (written by
``ct2-transformers-converter``) and the tokenizer (copied with ``--copy_files``; read by
``whisper_build.serving.engines.ctranslate2_engine``)."""
HF_CHECKPOINT_DIR = "hf"
"""Folder, directly under the model's prefix ``models/<model>/``, holding the Hugging Face
``transformers`` Whisper checkpoint that ``serving_engine: torch`` groups serve (e.g. a fine-tune of
the configured model). Not a GPU-architecture name (those are ``sm<digits>[-<MIG profile>]``), so it
never collides with an engine target's prefix."""
HF_REQUIRED_FILES = ("config.json", "tokenizer.json")
"""Files besides the weights that the ``torch`` engine cannot load without: the model config
(``WhisperConfig``) and the tokenizer (``whisper_build.serving.engines.torch_engine``)."""
HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""The weights, one of: a single ``model.safetensors``, or the index of a sharded checkpoint
(``model-0000i-of-0000n.safetensors``), the names ``transformers``' ``save_pretrained`` writes
(``safe_serialization``, the default since transformers 4.35)."""


def engine_target(gpu_arch: str, mig_profile: str | None = None) -> str:
    """Name of what one engine is built for: the architecture, plus the MIG profile of a sliced GPU.

    ``sm86``; ``sm90-1g.10gb`` for a ``1g.10gb`` slice of an H100 (its engine is sized to the slice's
    memory, so it is built and published apart from a whole-GPU ``sm90`` engine). Used wherever the
    S3 layout below says ``<gpu_arch>``.
    """
    return f"{gpu_arch}-{mig_profile}" if mig_profile else gpu_arch


def kubernetes_name(target: str) -> str:
    """An engine target as a Kubernetes / CodeBuild name part (no dots): ``sm90-1g.10gb`` → ``sm90-1g-10gb``."""
    return target.replace(".", "-")


def model_prefix(model: str, gpu_arch: str) -> str:
    """S3 prefix that one GPU architecture's pods mount, e.g. ``models/large-v3-turbo/sm86/``.

    Ends with ``/``: Mountpoint's ``prefix`` mount option requires it (mountpoint-s3
    ``doc/CONFIGURATION.md``).
    """
    return f"{MODELS_ROOT}{model}/{gpu_arch}/"


def pointer_key(model: str, gpu_arch: str) -> str:
    """Object key of the version pointer, e.g. ``models/large-v3-turbo/sm86/current.json``."""
    return model_prefix(model, gpu_arch) + POINTER_FILE


def version_prefix(model: str, gpu_arch: str, version: str) -> str:
    """Prefix of one published engine version, e.g. ``models/large-v3-turbo/sm86/20261130T101500Z/``."""
    return f"{model_prefix(model, gpu_arch)}{version}/"


def ctranslate2_prefix(model: str, gpu_arch: str) -> str:
    """Prefix of the CTranslate2 conversion, e.g. ``models/large-v3-turbo/sm89/ctranslate2/``.

    Under :func:`model_prefix` so the pods already mount it (as ``<mount>/ctranslate2``). A
    CTranslate2 model is not tied to a GPU architecture; the same conversion is copied to each
    architecture that serves with it.
    """
    return f"{model_prefix(model, gpu_arch)}{CTRANSLATE2_DIR}/"


def hf_checkpoint_prefix(model: str) -> str:
    """Prefix of the Hugging Face checkpoint ``torch`` groups serve, e.g. ``models/large-v3-turbo/hf/``.

    One copy for every GPU type (PyTorch runs the same weights on any of them), beside the per-arch
    prefixes of :func:`model_prefix`; ends with ``/`` like them (a Mountpoint ``prefix``).
    """
    return f"{MODELS_ROOT}{model}/{HF_CHECKPOINT_DIR}/"
