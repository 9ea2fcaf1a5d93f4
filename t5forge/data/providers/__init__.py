"""Dataset providers: what a model trains and evaluates on. A Task (task) is a named recipe
from a source to model features; a Mixture (mixture) samples tasks by rate, and the registries
beside it name both. with_sentinels and tfexample_file_task make tasks from tasks or files as
SeqIO and T5X do."""
