"""DNN training jobs: per-GPU memory (ZeRO model states, activations) and the GPU choice.

A DNN job's memory need is known before it runs, from the model's shape and the
training setup written on a ``#HARP dnn ...`` line, so for these jobs harp
computes instead of learning: ``params`` counts parameters from a Hugging Face
config, ``zero`` turns a setup into bytes per GPU, ``gpu_choice`` picks the
cheapest site configuration that fits, ``plan`` turns that into sbatch changes,
``refine`` lets recorded peaks override the formula once jobs have run.

Nothing here imports numpy or scikit-learn: the planner runs on harpd's submit
path, where start-up cost matters.
"""
