"""What the edge works out from a client's address, worked out once per address.

Every fenced request and every beacon needs the same things derived from who sent it: the
client address (the peer, or behind trusted proxies the rightmost untrusted
``X-Forwarded-For`` hop: ``edge.client_ip``), the geofence's verdict on it, the network
the invalid-traffic rules key on (IPv6 by its /64: ``edge.ivt``), and the keyed hashes of
that network (the rate key, and per user agent the binding a token carries). A browser
sends several requests from one address, so ``ClientCache`` keeps all of them in one entry
per (peer, ``X-Forwarded-For`` values): a request from a known client parses nothing and
hashes nothing, and a new client's address is parsed once, not once per rule.

Bounded: an LRU of ``size`` entries, because the clients sending now are the ones that
will send next (a page's beacons follow its match request within seconds), and a flood of
new addresses must push out only the oldest, never empty the cache the current clients
rely on. Each entry keeps the bindings of at most ``USER_AGENTS`` user agents (emptied
when full: an address shared by many browsers works its bindings out again).

What each answer depends on is checked before it is reused: the whole cache is forgotten
when the signing key changes (a new ``Signer``: no hash of the old key is handed out
again), and a geofence verdict is judged again when the geo reader or the fence is another
one (a reload opens a new reader).

Privacy: raw addresses are kept in this process's memory only, as the cache's keys and
entries; the store, logs and tokens see the keyed hashes alone, and the key never leaves
the ``Signer``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from starlette.types import Scope

from edge.client_ip import IPAddress, forwarded_client, parse_address, scope_inputs, trusted
from edge.ivt import MAX_USER_AGENT, address_key, network_binding, network_of
from edge.settings import IPNetwork
from edge.signing import Signer
from geoip.fence import Verdict

CACHE_SIZE = 4096
USER_AGENTS = 4  # bindings kept per entry
# The scope's key of the request's entry, left there by the first rule that asks. In the
# scope itself, not its "state": a scope is made per request, while a state is only a copy
# of the lifespan's namespace, which a server that does not copy it would share.
SCOPE_KEY = "edge.client"

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class DecisionCache(Generic[K, V]):
    """A bounded LRU of what was worked out from one source (a signing key, a geo reader):
    asked or given anything for another source, it forgets all it held first."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        if size < 1:
            raise ValueError("the decision cache needs room for one entry")
        self.size = size
        self._source: object = None
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, source: object, key: K) -> V | None:
        if source is not self._source:  # another source: nothing remembered holds
            self._entries.clear()
            self._source = source
            return None
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
        return hit

    def put(self, source: object, key: K, value: V) -> None:
        if source is not self._source:
            self._entries.clear()
            self._source = source
        self._entries[key] = value
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class ClientEntry:
    """One client address and what was derived from it (see the module's note)."""

    __slots__ = ("address", "bindings", "fenced", "ip", "key", "network", "trusted")

    def __init__(self, address: IPAddress | None, trusted: bool | None) -> None:
        self.address = address  # None: not an address, refused by the geofence
        self.ip = None if address is None else str(address)  # as the routes see it
        # Whether the address is a proxy whose X-Forwarded-For hops are read: worked out
        # for a peer's own entry, the only one asked (None for a client behind a proxy).
        self.trusted = trusted
        self.network = network_of(address, self.ip)
        # (geo reader, fence, verdict): the geofence's verdict and what it was judged with.
        self.fenced: tuple[object, object, Verdict] | None = None
        self.key: str | None = None  # the rate key (``edge.ivt.client_key``), made on demand
        self.bindings: dict[str, str] = {}  # user agent -> ``edge.ivt.client_binding``


_Key = tuple[str | None, tuple[str, ...]]


class ClientCache:
    """The entries of the clients seen lately, keyed by (peer, ``X-Forwarded-For`` values)."""

    def __init__(
        self,
        trusted_proxies: tuple[IPNetwork, ...],
        signer: Callable[[], Signer | None],
        size: int = CACHE_SIZE,
    ) -> None:
        """``signer``: a getter of the edge's signer (loaded at start-up, after this)."""
        self.trusted_proxies = tuple(trusted_proxies)
        self._signer = signer
        self._entries: DecisionCache[_Key, ClientEntry] = DecisionCache(size)

    def __len__(self) -> int:
        return len(self._entries)

    def of_scope(self, scope: Scope) -> ClientEntry:
        """The entry of the request's client: the one an earlier rule of this request left
        in the scope, else found (or made) and left there."""
        entry: ClientEntry | None = scope.get(SCOPE_KEY)
        if entry is None:
            peer, forwarded_for = scope_inputs(scope)
            entry = scope[SCOPE_KEY] = self.lookup(peer, forwarded_for)
        return entry

    def lookup(self, peer: str | None, forwarded_for: tuple[str, ...]) -> ClientEntry:
        """The entry of the client behind ``peer`` and its ``X-Forwarded-For`` values."""
        signer = self._signer()
        key = (peer, forwarded_for)
        entry = self._entries.get(signer, key)
        if entry is not None:
            return entry
        if not forwarded_for or peer is None:
            address = parse_address(peer) if peer is not None else None
            entry = ClientEntry(
                address, address is not None and trusted(address, self.trusted_proxies)
            )
        else:
            # The peer's own entry says whether it is a proxy of ours (a proxy's entry is
            # in use by every client behind it, so it stays cached).
            proxy = self.lookup(peer, ())
            if proxy.address is None or not proxy.trusted:
                # Hops an untrusted peer wrote are not read, nor kept as a key: a client
                # sending a new X-Forwarded-For each time must not push others out.
                return proxy
            found = forwarded_client(proxy.address, forwarded_for, self.trusted_proxies)
            entry = ClientEntry(found, None)
        self._entries.put(signer, key, entry)
        return entry

    def key(self, entry: ClientEntry) -> str:
        """The client's rate key (``edge.ivt.client_key`` of its address)."""
        key = entry.key
        if key is None:
            key = entry.key = address_key(self._loaded_signer(), entry.network)
        return key

    def binding(self, entry: ClientEntry, user_agent: str) -> str:
        """What a token issued to this client and user agent is bound to
        (``edge.ivt.client_binding``)."""
        agent = user_agent[:MAX_USER_AGENT]  # the part the binding covers
        binding = entry.bindings.get(agent)
        if binding is None:
            binding = network_binding(self._loaded_signer(), entry.network, agent)
            if len(entry.bindings) >= USER_AGENTS:
                entry.bindings.clear()
            entry.bindings[agent] = binding
        return binding

    def binding_for(self, entry: ClientEntry, user_agent: str, bound_to: str | None) -> str | None:
        """This client's binding to judge a token bound to ``bound_to`` with (None: the token
        is not bound): the current key's, or during a rotation the previous key's when the
        token was bound under it (a client is the same client whichever key named it)."""
        if bound_to is None:
            return None
        binding = self.binding(entry, user_agent)
        previous = self._loaded_signer().previous
        if binding == bound_to or previous is None:
            return binding
        before = network_binding(previous, entry.network, user_agent[:MAX_USER_AGENT])
        return before if before == bound_to else binding

    def _loaded_signer(self) -> Signer:
        signer = self._signer()
        if signer is None:
            raise RuntimeError("the signer is loaded at start-up, before any request")
        return signer
