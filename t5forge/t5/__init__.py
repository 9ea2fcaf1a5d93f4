"""T5's port at T5's paths: `t5.X` is `t5forge.t5.X` (t5.data's preprocessors,
postprocessors, tasks, mixtures and glue_utils; t5.evaluation's metrics), over t5forge's data
wing, without TensorFlow. While t5forge imports a task module, `import t5...` gives these
modules (t5forge.compat)."""
