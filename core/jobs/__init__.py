"""core's own runnable jobs (`job: <name>` in configs/*.yaml). Each module registers its job with
`mstrain.registry.register_job`; `mstrain.registry` imports a module only when its job runs.
`mstrain.jobs.common` holds the builders shared by jobs (optimizer, callbacks, run set-up)."""

__all__ = ["common", "mlp_mnist"]
