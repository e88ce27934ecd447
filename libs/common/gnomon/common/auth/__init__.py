"""Identity and access: who a caller is (:mod:`.authenticator`), what each role may do
(:mod:`.principals`), and what each RPC requires (:mod:`.policy`). docs/security.md is the user's view."""
