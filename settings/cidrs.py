"""Allow-list CIDRs (``endpoint.allowed_cidrs``, ``cluster.public_access_cidrs``): normalised and checked.

* A bare address (``203.0.113.7``) is the one host: it becomes ``203.0.113.7/32``.
* Host bits set (``203.0.113.7/24``) is refused with both readings to choose from (the network, or
  the one address), because either may be what was meant.
* IPv6 is refused by name: the VPC, its load balancers' listeners and the EKS public endpoint this
  project creates are IPv4-only.
* Entries are de-duplicated after normalisation, keeping their order.

Addresses that are not reachable from the internet (:data:`NON_PUBLIC_BLOCKS`) are refused where
the allow-list guards an internet-facing endpoint (the caller decides where: :func:`non_public_entries`).
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

import ipaddress

NON_PUBLIC_BLOCKS = {
    ipaddress.IPv4Network("10.0.0.0/8"): "private (RFC 1918)",
    ipaddress.IPv4Network("172.16.0.0/12"): "private (RFC 1918)",
    ipaddress.IPv4Network("192.168.0.0/16"): "private (RFC 1918)",
    ipaddress.IPv4Network("100.64.0.0/10"): "shared carrier-grade NAT space (RFC 6598)",
    ipaddress.IPv4Network("127.0.0.0/8"): "loopback (RFC 1122)",
    ipaddress.IPv4Network("169.254.0.0/16"): "link-local (RFC 3927)",
}
"""IANA IPv4 special-purpose blocks (RFC 6890 registry) from which no request on the internet comes:
an internet-facing endpoint sees its clients' public addresses, so such an entry admits nobody."""


def normalise_cidr(value: str) -> str:
    """``203.0.113.7`` → ``203.0.113.7/32``; ``203.0.113.0/24`` stays.

    Raises:
        ValueError: IPv6, not an address, or host bits set (the message names the network and the /32).
    """
    text = value.strip()
    if ":" in text:
        raise ValueError(
            f"'{value}' is an IPv6 CIDR; this deployment's VPC, load balancer and EKS endpoint are IPv4-only: "
            "list the clients' IPv4 CIDRs"
        )
    try:
        network = ipaddress.IPv4Network(text if "/" in text else f"{text}/32")
    except ValueError as err:
        if "has host bits set" in str(err):
            address = text.split("/", 1)[0]
            loose = ipaddress.IPv4Network(text, strict=False)
            raise ValueError(
                f"'{value}' has host bits set: write {loose} (the whole network) or {address}/32 (that one address)"
            ) from None
        raise ValueError(f"'{value}' is not an IPv4 CIDR block such as 203.0.113.0/24 ({err})") from None
    return str(network)


def normalise_cidrs(values: list[str]) -> list[str]:
    """Each entry through :func:`normalise_cidr`, duplicates dropped, order kept.

    Raises:
        ValueError: naming every bad entry, one per ``; ``.
    """
    result: list[str] = []
    problems: list[str] = []
    for value in values:
        try:
            cidr = normalise_cidr(value)
        except ValueError as err:
            problems.append(str(err))
            continue
        if cidr not in result:
            result.append(cidr)
    if problems:
        raise ValueError("; ".join(problems))
    return result


def non_public_entries(cidrs: list[str]) -> list[str]:
    """``'10.0.0.0/8' (private (RFC 1918))`` for each entry inside a :data:`NON_PUBLIC_BLOCKS` block."""
    found = []
    for cidr in cidrs:
        network = ipaddress.IPv4Network(cidr)
        for block, kind in NON_PUBLIC_BLOCKS.items():
            if network.subnet_of(block):
                found.append(f"{cidr} ({kind})")
                break
    return found
