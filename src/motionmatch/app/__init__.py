"""Browser app: an aiohttp server simulating one character per page (server.py: `make_app`, `run_app`;
the `serve` command is cli/serve.py) and the three.js page in static/."""
