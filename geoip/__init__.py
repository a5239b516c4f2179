"""geoip package."""
