"""A SimGrid platform file checked before SimGrid loads it: SimGrid aborts (a backtrace, exit 134)
on a bad number, an unknown host or link in a route, or a duplicate id. Used for the platforms the
real StarPU-SimGrid reads (its bus platform, the SMPI cluster platform); numasim checks its own
platform on load (simulator/src/platform.cpp)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from lxml import etree

from testbed.common.errors import InputError

#: SimGrid 3.32's units (src/surf/xml/surfxml_sax_cb.cpp unit tables) for the attributes these
#: platforms use; a value is a number followed by one of them.
_UNITS = {"speed": r"(?:[kMGTPEZY]?f|[kMGTPEZY]?flops)",
          "bandwidth": r"(?:[kMGTPEZY]?i?[Bb]ps|[KMGTPEZY]iB?ps)",
          "latency": r"(?:[munpf]?s|m|h|d|w)"}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def _quantity(path: Path, el: etree._Element, attr: str) -> None:
    m = re.fullmatch(_NUMBER + _UNITS[attr], el.get(attr) or "")
    v = float(m.group(1)) if m else math.nan
    # A bandwidth may be 0: StarPU writes its bus platform's NUMA0/Interconnect links with the
    # fastest GPU link's rate, 0 on a machine without GPUs (perfmodel_bus.c); no route uses them.
    if not math.isfinite(v) or v < 0 or (v == 0 and attr == "speed"):
        raise InputError(path, f"{el.tag} {el.get('id')!r} {attr}",
                         f"a finite {'positive number' if attr == 'speed' else 'number >= 0'} with a SimGrid unit")


#: Where each element may sit (SimGrid's DTD; its parser aborts on anything else).
_PARENTS = {"host": {"AS", "zone"}, "link": {"AS", "zone"}, "router": {"AS", "zone"}, "route": {"AS", "zone"},
            "link_ctn": {"route", "zoneRoute", "ASroute", "bypassRoute", "bypassZoneRoute", "bypassASroute"},
            "prop": {"host", "link", "zone", "AS", "config"}, "AS": {"platform", "AS", "zone"},
            "zone": {"platform", "AS", "zone"}, "config": {"platform"}}


#: The attributes SimGrid's parser accepts on each element (an unknown one aborts it), and the
#: closed sets of values some of them take.
_ATTRIBUTES = {"platform": {"version"}, "config": {"id"}, "prop": {"id", "value"}, "AS": {"id", "routing"},
               "zone": {"id", "routing"}, "router": {"id", "coordinates"},
               "host": {"id", "speed", "core", "pstate", "availability_file", "state_file", "coordinates"},
               "link": {"id", "bandwidth", "latency", "sharing_policy", "bandwidth_file", "latency_file", "state_file"},
               "route": {"src", "dst", "symmetrical"}, "link_ctn": {"id", "direction"},
               "zoneRoute": {"src", "dst", "gw_src", "gw_dst", "symmetrical"},
               "ASroute": {"src", "dst", "gw_src", "gw_dst", "symmetrical"},
               "bypassRoute": {"src", "dst"}, "bypassZoneRoute": {"src", "dst", "gw_src", "gw_dst"}}
_VALUES = {"routing": {"Full", "Floyd", "Dijkstra", "DijkstraCache", "None", "Vivaldi", "Cluster"},
           "sharing_policy": {"SHARED", "SPLITDUPLEX", "FATPIPE", "WIFI"}, "symmetrical": {"YES", "NO"},
           "direction": {"UP", "DOWN", "NONE"}}


def _check_attributes(path: Path, el: etree._Element) -> None:
    allowed = _ATTRIBUTES.get(el.tag)
    if allowed is None:
        raise InputError(path, f"line {el.sourceline}", f"a SimGrid platform element (one of {sorted(_ATTRIBUTES)}), "
                                                        f"not <{el.tag}>")
    for name, value in el.attrib.items():
        if name not in allowed or value not in _VALUES.get(name, {value}):
            raise InputError(path, f"line {el.sourceline} <{el.tag}> {name}",
                             f"one of {sorted(_VALUES[name])}" if name in allowed else f"one of {sorted(allowed)}")


def _check_structure(path: Path, root: etree._Element) -> None:
    """No text where SimGrid expects none, each element under a parent the DTD allows, and a
    zone's hosts and links before its routes."""
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue  # comments, processing instructions
        where = f"line {el.sourceline}"
        _check_attributes(path, el)
        if (el.text or "").strip() or (el is not root and (el.tail or "").strip()):
            raise InputError(path, where, f"no text inside or after <{el.tag}> (a SimGrid platform has none)")
        parent = el.getparent()
        if parent is not None and el.tag in _PARENTS and parent.tag not in _PARENTS[el.tag]:
            raise InputError(path, where, f"<{el.tag}> inside one of {sorted(_PARENTS[el.tag])}, not <{parent.tag}>")
        if el.tag in ("AS", "zone"):
            tags = [c.tag for c in el if isinstance(c.tag, str)]
            first_route = next((i for i, t in enumerate(tags) if "oute" in t), len(tags))
            if any(t in ("host", "link", "router") for t in tags[first_route:]):
                raise InputError(path, where, "a zone's hosts and links before its routes")


def check_simgrid_platform(path: Path, hosts_needed: set[str]) -> None:
    """Well-formed XML; hosts and links with unique ids, every speed, bandwidth and latency a finite
    number with a SimGrid unit; routes naming declared hosts and links; `hosts_needed` declared."""
    try:
        root = etree.fromstring(path.read_bytes(), etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as e:
        raise InputError(path, f"line {e.lineno}", f"well-formed XML (a SimGrid platform): {e.msg}") from None
    except OSError as e:
        raise InputError(path, "file", f"a readable SimGrid platform ({e.strerror})") from None
    _check_structure(path, root)
    hosts: set[str] = set()
    links: set[str] = set()
    for el in root.iter("host", "link"):
        ident = el.get("id") or ""
        if not ident or ident in hosts | links:
            raise InputError(path, f"{el.tag} {ident!r}", "a non-empty id used once")
        (hosts if el.tag == "host" else links).add(ident)
        for attr in ("speed",) if el.tag == "host" else ("bandwidth", "latency"):
            _quantity(path, el, attr)
    if hosts_needed - hosts:
        raise InputError(path, "hosts", f"hosts {', '.join(sorted(hosts_needed - hosts))}")
    for route in root.iter("route"):
        ends = {route.get("src"), route.get("dst")}
        if not ends <= hosts or not {c.get("id") for c in route.iter("link_ctn")} <= links:
            raise InputError(path, f"route {route.get('src')} -> {route.get('dst')}", "declared hosts and links")
