"""Running the service as several server processes behind one port."""
