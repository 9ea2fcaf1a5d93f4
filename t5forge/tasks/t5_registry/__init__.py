"""T5's task registry (`t5.data.tasks`, `t5.data.mixtures`) on t5forge: importing `tasks` or
`mixtures` registers them, as in T5; `import t5.data.mixtures` in a gin file or task module
does the same through t5forge.compat."""
