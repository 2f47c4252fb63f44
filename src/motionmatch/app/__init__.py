"""Browser app: an aiohttp server simulating one character per page (server.py: `add_serve_args`,
`run_serve`, `make_app`) and the three.js page in static/."""
