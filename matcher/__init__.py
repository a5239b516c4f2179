"""In-process matching engine: catalogue, embeddings, brand safety, geo, eligibility, ranking.

Never imports ``edge``; the edge calls ``Matcher.match`` in-process.
"""

from matcher.catalogue import Catalogue, CatalogueError, load_catalogue, parse_catalogue
from matcher.embeddings import CachedEmbedder, Embedder, MiniLM
from matcher.engine import Matcher, MatcherConfig
from matcher.state import MatchState, MemoryState

__all__ = [
    "CachedEmbedder",
    "Catalogue",
    "CatalogueError",
    "Embedder",
    "MatchState",
    "Matcher",
    "MatcherConfig",
    "MemoryState",
    "MiniLM",
    "load_catalogue",
    "parse_catalogue",
]
