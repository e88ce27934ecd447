"""The domain model of Gnomon (docs/concepts.md, "Vocabulary" and "The life of a job"): pure types and rules, no I/O.

* :mod:`.states`: :class:`~.states.JobState`, :class:`~.states.AttemptState`, the legal transitions,
  :class:`~.states.CancelOutcome`;
* :mod:`.failures`: :class:`~.failures.FailureClass`, :class:`~.failures.RetryReason`;
* :mod:`.transitions`: the one after-failure transition, :func:`~.transitions.after_failure`;
* :mod:`.attempts`: attempt identity (:class:`~.attempts.AttemptId`, :class:`~.attempts.AttemptKey`),
  :class:`~.attempts.Claimed`, :class:`~.attempts.Result`, :class:`~.attempts.Reaped`;
* :mod:`.jobs`: :class:`~.jobs.NewJob`, the one ``jobs`` row builder (:func:`~.jobs.job_row`),
  shards, retry policy columns, occurrence identity;
* :mod:`.policies`: misfire/overlap/DST policies, overlap actions, occurrence decisions and sources,
  breaker states;
* :mod:`.reasons`: :class:`~.reasons.ErrorReason`, every error reason on the wire.

Every enum is an ``enum.StrEnum`` whose values equal the text stored in the database and sent on
the wire. The package imports nothing eagerly (``gnomon.common.retry`` and this package import each
other's modules); import the submodules.
"""
