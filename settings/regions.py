"""Which AWS regions exist and which of them offer the services a deployment needs.

Source: the partition and endpoint data bundled with botocore (``botocore/data/endpoints.json``),
read offline (no AWS call, no credentials). botocore knows where a *service* has an endpoint; it does
not know where a particular SageMaker instance type is offered, so instance-type availability per
region is left to the service quota request (docs/deploy.md, "Prerequisites").
"""

from __future__ import annotations

import difflib
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.model import ServiceModel

SERVICES_NEEDED = {
    "sagemaker": "SageMaker (HyperPod)",
    "eks": "Amazon EKS",
}
"""botocore service name → what the deployment uses it for; every deployment needs these."""
OBSERVABILITY_SERVICES = {"amp": "Amazon Managed Service for Prometheus"}
"""Needed when ``observability.enabled``."""
GRAFANA_SERVICES = {"grafana": "Amazon Managed Grafana"}
"""Needed when ``observability.grafana``."""


@functools.lru_cache(maxsize=1)
def _endpoint_data() -> dict[str, Any]:
    """The ``endpoints.json`` bundled with botocore, read once."""
    from botocore.loaders import create_loader

    data: dict[str, Any] = create_loader().load_data("endpoints")
    return data


@functools.lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every region of every partition botocore knows (``aws``, ``aws-cn``, ``aws-us-gov``, …)."""
    return frozenset(region for partition in _endpoint_data()["partitions"] for region in partition["regions"])


@functools.cache
def partition_of(region: str) -> str:
    """The partition of ``region`` (``aws``, ``aws-cn``, ``aws-us-gov``, …), as ARNs spell it.

    Raises:
        botocore.exceptions.UnknownRegionError: no partition of botocore's data matches ``region``.
    """
    from botocore.regions import EndpointResolver

    partition: str = EndpointResolver(_endpoint_data()).get_partition_for_region(region)
    return partition


@functools.cache
def service_regions(service: str) -> frozenset[str]:
    """Regions, over all partitions, where botocore has an endpoint for ``service`` (e.g. ``"eks"``)."""
    from botocore.regions import EndpointResolver

    resolver = EndpointResolver(_endpoint_data())
    prefix = service_model(service).endpoint_prefix  # endpoints.json keys services by it ("api.sagemaker")
    return frozenset(
        region
        for partition in resolver.get_available_partitions()
        for region in resolver.get_available_endpoints(prefix, partition)
    )


@functools.cache
def service_model(service: str) -> ServiceModel:
    """The API model of ``service`` (e.g. ``"sagemaker"``), read without a botocore session.

    A session would read the AWS config of ``AWS_PROFILE`` and fail with ``ProfileNotFound`` when it
    names a missing profile, though nothing here needs credentials (offline commands need no profile).
    """
    from botocore.loaders import create_loader
    from botocore.model import ServiceModel

    return ServiceModel(create_loader().load_service_model(service, "service-2"), service_name=service)


def check_region(region: str) -> str:
    """Raise unless ``region`` is a region botocore knows.

    Raises:
        ValueError: naming up to three close region names ("did you mean").
    """
    regions = known_regions()
    if region not in regions:
        close = difflib.get_close_matches(region, sorted(regions), n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (e.g. us-east-1)"
        raise ValueError(f"'{region}' is not an AWS region botocore knows{hint}")
    return region


def missing_services(region: str, services: dict[str, str]) -> list[str]:
    """Descriptions of the ``services`` (botocore name → description) with no endpoint in ``region``."""
    return [description for service, description in services.items() if region not in service_regions(service)]
