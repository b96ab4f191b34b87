"""English-German parallel corpus builder (Debian packages: LibreOffice help + gettext)."""
