"""The result record (write, read, provenance), the tidy table built from records, and the
campaign's progress counted from them."""
