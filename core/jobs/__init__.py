"""core's own runnable jobs (`job: <name>` in configs/*.yaml). Each module registers its job with
`core.registry.register_job`; `core.registry` imports a module only when its job runs.
`core.jobs.common` holds the builders shared by jobs (optimizer, callbacks, run set-up)."""

__all__ = ["common", "mlp_mnist"]
