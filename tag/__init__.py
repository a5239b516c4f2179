"""tag package."""
