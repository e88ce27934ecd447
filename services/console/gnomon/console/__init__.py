"""The Gnomon web console: server-rendered pages over the public API (docs/console.md, ADR 0006).

The console is a client of the API like the CLI: every page is made of SDK calls made with the
signed-in user's own API key, so what a user sees and may do is exactly what the API allows them.
It never opens the database or etcd.
"""
