"""The delivery edge behind the /dea routes: request schemas and validation, the publisher
registry (CORS allow-list), client address resolution, page matching and beacon handling.
``edge.routes.dea`` lists the routes; ``edge.middleware`` holds CORS, headers and geofence."""
