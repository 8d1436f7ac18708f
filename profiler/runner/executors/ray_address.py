"""``--ray-address``, checked before anything is printed or created: its syntax (here, by
the rules of host names and ports, not by whatever ``socket`` or ``idna`` raise), then
whether anything answers there (a TCP connect bounded by ``PROBE_TIMEOUT_S``).

Forms taken: ``auto`` and ``local`` (Ray finds or starts the cluster; nothing to check),
``HOST``, ``HOST:PORT``, ``[IPv6]:PORT``, each optionally as ``ray://...`` (Ray Client).
No port means Ray's default, 6379. Imports nothing of Ray.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Optional

from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.units import printable

DEFAULT_PORT = 6379
PROBE_TIMEOUT_S = 5.0  # TCP connect to the head node's address
MAX_HOST = 253  # RFC 1035: a name of at most 253 characters in text form
MAX_LABEL = 63  # ... each dot-separated label at most 63
SCHEMES = ("ray",)
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$", re.IGNORECASE)


def _refuse(address: str, why: str) -> SweepError:
    shown = printable(repr(address))
    return SweepError(f"--ray-address {shown if len(shown) <= 80 else shown[:77] + '...'}: {why}")


def parse(address: str) -> Optional[tuple[str, int]]:
    """(host, port) of an address, None for ``auto``/``local``; SweepError (one line) for
    anything that is not an address."""
    text = str(address).strip()
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme.lower() not in SCHEMES:
            raise _refuse(address, f"unknown scheme {scheme!r}; give HOST:PORT or ray://HOST:PORT")
        text = rest
    text = text.rstrip("/")
    if not text:
        raise _refuse(address, "is empty; give HOST:PORT, or leave --ray-address out to start a local cluster")
    if text in ("auto", "local") and not sep:
        return None
    if text.startswith("["):  # [IPv6]:PORT
        host, closed, port = text[1:].partition("]")
        if not closed or (port and not port.startswith(":")):
            raise _refuse(address, "is not [IPv6]:PORT")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _refuse(address, f"{host!r} is not an IPv6 address") from None
        return host, _port(address, port[1:] if port else "")
    if text.count(":") > 1:
        raise _refuse(address, "an IPv6 address goes in brackets: [::1]:6379")
    host, _, port = text.partition(":")
    _check_host(address, host)
    return host, _port(address, port if ":" in text else "")


def _port(address: str, text: str) -> int:
    if text == "":
        return DEFAULT_PORT
    if not text.isascii() or not text.isdigit():
        raise _refuse(address, f"port {printable(repr(text))} is not a number; give HOST:PORT")
    port = int(text)
    if not 1 <= port <= 65535:
        raise _refuse(address, f"port {port} is not in 1-65535")
    return port


def _check_host(address: str, host: str) -> None:
    if not host:
        raise _refuse(address, "has no host; give HOST:PORT")
    try:
        ipaddress.IPv4Address(host)
        return
    except ValueError:
        pass
    if len(host) > MAX_HOST:
        raise _refuse(address, f"host name is {len(host)} characters; at most {MAX_HOST}")
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError as exc:  # a label idna cannot encode (too long, forbidden characters)
        raise _refuse(address, f"host name is not valid ({exc.__class__.__name__}: {exc})") from None
    if len(ascii_host) > MAX_HOST:
        raise _refuse(address, f"host name is {len(ascii_host)} characters once encoded; at most {MAX_HOST}")
    for label in ascii_host.rstrip(".").split("."):
        if len(label) > MAX_LABEL:
            raise _refuse(address, f"host name label of {len(label)} characters; at most {MAX_LABEL}")
        if not _LABEL.match(label):
            raise _refuse(address, f"host name label {printable(repr(label))} is not letters, digits, '_' and inner '-'")


def probe(address: str) -> None:
    """SweepError unless something accepts a TCP connection at ``address`` (``auto``/``local``:
    nothing to check). The syntax is checked first, so an invalid address never reaches
    ``socket`` (whose idna codec raises UnicodeError on a long name)."""
    where = parse(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=PROBE_TIMEOUT_S).close()
    except (OSError, UnicodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise SweepError(f"cannot reach the Ray cluster at {printable(address)}: {why}; start its head node with "
                         f"`ray start --head`, or leave --ray-address out to start a local cluster") from None
