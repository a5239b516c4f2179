"""Route modules. Each exposes ``routes(ctx) -> list[BaseRoute]``; ``edge.app`` lists them."""
