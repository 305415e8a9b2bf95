"""``make publish-ctranslate2 CONFIG=…``: the CTranslate2 conversion of the model for the groups that serve it.

The fallback while a TensorRT-LLM engine cannot be built (docs/deploy.md, "If the engine build fails").
"""

from __future__ import annotations

from settings import names, storage
from settings.schema import WHISPER_MODELS, DeploymentConfig
from whisper_build.deploy.steps import Command, Step

CTRANSLATE2_VENV = ".venv-ctranslate2"
"""Where ``make publish-ctranslate2`` installs the converter (PyTorch + transformers: kept out of ``.venv``)."""


def ctranslate2_targets(config: DeploymentConfig) -> list[str]:
    """Engine targets of the groups that serve ``ctranslate2`` (each needs the conversion under its prefix)."""
    return list(
        dict.fromkeys(group.engine_target for group in config.gpu_groups if group.engine.layout == "conversion")
    )


def ctranslate2_steps(config: DeploymentConfig, account: str, ctranslate2_version: str | None) -> list[Step]:
    """``make publish-ctranslate2 CONFIG=…``: convert the model to CTranslate2 (float16) once, upload it per target.

    The converter is CTranslate2's ``ct2-transformers-converter`` with the command line faster-whisper
    documents for its models (the same as the preflight's fix, :func:`whisper_build.podstart.preflight.
    ctranslate2_publish_commands`); it downloads the Hugging Face checkpoint. The output is not tied to
    a GPU architecture, so one conversion is synced to every target of a ``ctranslate2`` group.

    Args:
        config: The config; at least one group serves ``ctranslate2`` (else there is nothing to publish).
        account: AWS account id (the model bucket's name has it).
        ctranslate2_version: The serving image's CTranslate2 version (the pin of ``requirements/serving.txt``),
            so the model format matches the runtime that loads it; ``None``: the newest.
    """
    bucket = names.bucket_name(config.project_name, names.MODEL_BUCKET_PURPOSE, account, config.region)
    targets = ctranslate2_targets(config)
    hf_id = WHISPER_MODELS[config.model.name][0] if config.model.name in WHISPER_MODELS else config.model.name
    local = f"whisper-{config.model.name}-ct2"
    package = f"ctranslate2=={ctranslate2_version}" if ctranslate2_version else "ctranslate2"
    prefixes = {target: storage.ctranslate2_prefix(config.model.name, target) for target in targets}
    return [
        Step(
            "ctranslate2",
            f"CTranslate2 conversion of {hf_id} (float16) → s3://{bucket}/models/{config.model.name}/"
            f"<{', '.join(targets)}>/ctranslate2/ for the groups serving ctranslate2",
            "10–30 min (a PyTorch install and a 1.6 GB checkpoint download for large-v3-turbo; estimate)",
            "S3 storage (cents)",
            (
                Command(("python3", "-m", "venv", CTRANSLATE2_VENV)),
                Command((f"{CTRANSLATE2_VENV}/bin/pip", "install", "-q", package, "transformers[torch]")),
                Command(
                    (
                        f"{CTRANSLATE2_VENV}/bin/ct2-transformers-converter",
                        "--model",
                        hf_id,
                        "--output_dir",
                        local,
                        "--copy_files",
                        "tokenizer.json",
                        "preprocessor_config.json",
                        "--quantization",
                        "float16",
                        "--force",
                    )
                ),
                *(
                    Command(("aws", "s3", "sync", local, f"s3://{bucket}/{prefix}", "--region", config.region))
                    for prefix in prefixes.values()
                ),
            ),  # fmt: skip
            "skipped when every target has model.bin; otherwise converts again and syncs (only changed files upload)",
            (
                f"s3://{bucket}/models/{config.model.name}/<{', '.join(targets)}>/ctranslate2/model.bin exists",
                lambda session: all(
                    session.object_exists(bucket, prefix + "model.bin") for prefix in prefixes.values()
                ),
            ),
        )
    ]
