"""S3 layout of the model bucket (``docs/contracts.md`` §3).

Every pod of one GPU architecture mounts ``models/<model>/<gpu_arch>/`` through Mountpoint for
S3; the pointer ``current.json`` in that prefix names the version folder Triton serves. A new
engine is uploaded under a fresh version prefix and becomes live with one ``PutObject`` of the
pointer, so a half-finished upload never changes what running pods see.
"""

MODELS_ROOT = "models/"
"""Key prefix of every engine in the model bucket (the Mountpoint role may read only below it)."""
POINTER_FILE = "current.json"
MANIFEST_FILE = "manifest.json"
MODEL_REPOSITORY_DIR = "model_repository"


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
