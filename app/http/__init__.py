"""The HTTP face of the service: the ASGI app, its routes and the checks every request passes."""
