# %% [markdown] slideshow={"slide_type": "slide"}
# # Appendix A — Lab notebook: how the Multi30k recipe was found
#
# Chapter 7 gives its recipe in one table: two post-norm layers a side, 500 warmup steps to a
# peak rate of 1.0e-3, a cooldown over the second half, words rather than subwords, and dropout
# rising from 0.1 to 0.3. None of this was fixed in advance. Each setting is there because a full training
# run, or a short pilot, pointed to it. This appendix goes through those runs in the order they
# were made. For each it says what was changed, what came out, and what we concluded. It ends with
# the experiments we would run next, which a reader with an hour to spare can run too.
#
# Nothing here needs to be executed. The numbers are records of runs that took an hour each.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. How to read this
#
# * **One run per recipe.** Every run below was made once. Runs 1 to 7 were made on the two-core
#   Intel Xeon where chapter 7's recipe was first made. It has AMX, so training ran under bf16
#   autocast. The search of section 7 ran on a two-core AMD EPYC, also under bf16.
#   A single run cannot separate a difference of half a point from luck. Section 6 shows how large
#   that luck can be.
# * **Compare steps, not minutes.** The machine was shared with other work, and its speed changed
#   from day to day and within a run. Run 6, chapter 7's recipe until the search of section 7, took
#   65.7 minutes for its 3,040 steps. The run made just before it, with a fixed dropout rate, took
#   57.7 minutes for the same number. Yet when the two recipes were timed side by side on the
#   same 30 batches, a step cost 1.08 seconds with the fixed rate and 1.05 with the rising one.
#   During the slower run the machine itself was slow, and unevenly so: its first 456 steps averaged
#   1.42 seconds each, its last 500 only 1.22. Minutes are quoted below only where the notes of the
#   time give nothing else; where steps are known, use them. Training minutes never include time
#   spent on evaluation.
# * **What the scores are.** *Validation BLEU* is measured every half epoch (76 of an epoch's 152
#   steps) on the bare weights of that moment, decoded greedily. The two pilots scored only the
#   first 300 validation sentences. *Test* scores are on the 2016 Flickr test set, for the final
#   model as chapter 7 evaluates it. Runs 1 to 7 are compared with beam search at the paper's
#   length penalty $\alpha = 0.6$, the value they were scored with. Chapter 7's $\alpha = 2.5$
#   was chosen only after them, on the validation set. The search of section 7 (runs 8 to 11) is
#   scored with it. That is why run 6's first making shows 38.6 in the tables of sections 2 to
#   5 and 39.7 in section 6. *Last weights* means the weights of the final step
#   alone, decoded greedily: no averaging.
# * **When these runs were made.** They date from before the book was divided into its present
#   chapters. Settings are named below as `RunConfig` (`annotated/training/config.py`) names them today.
#
# The runs at a glance (the sections below give the details):
#
# | run | blocks | warmup → peak rate | vocabulary | dropout | rate after the peak | best val BLEU | test: beam / greedy |
# |---|---|---|---|---|---|---|---|
# | pilot A | post-norm | 400 → 1.6e-3 | words | | | 1.8 after 4.9 min | |
# | pilot B | pre-norm | 300 → 2.5e-3 | words | | | 10.9 after about 5 min | |
# | 1 | pre-norm | 300 → 2.5e-3 | words | 0.1 | equation 3 to the end | 34.8 | 36.6 / 36.1 |
# | 2 | pre-norm | 300 → 2.5e-3 | words | 0.2 | cooldown over the last 10 epochs | 34.8 | 37.0 / 36.3 |
# | 3 | pre-norm | as run 2 | 8,000 shared subwords | 0.2 | as run 2 | stopped: 3.4 after 10.3 min | |
# | 3, 14 epochs | pre-norm | as run 2 | 8,000 shared subwords | 0.2 | cooldown over the last 7 epochs | 31.4 | 32.7 / 31.4 |
# | 4 | post-norm | 500 → 1.0e-3 | words | 0.2 | cooldown over the last 10 epochs | 36.6 | 38.2 / 37.4 |
# | 5 | post-norm | 500 → 1.0e-3 | words | 0.3 | as run 4 | 32.3 | 35.0 / 33.9 |
# | 6 | post-norm | 500 → 1.0e-3 | words | 0.1 rising to 0.3 | as run 4 | 37.5 | 38.6 / 38.4 |
# | 7 | post-norm | 500 → 1.0e-3 | words | 0.1 rising to 0.4 | as run 4 | 36.7 | 37.1 / 36.7 |
#
# Run 6 was chapter 7's recipe until the search of section 7, which replaced its three layers a
# side with two (run 9). Chapter 7's notebook shows that two-layer recipe. Run 6 was made
# twice, on two machines (section 6).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Pre-norm first (pilots, runs 1 and 2)
#
# **Two five-minute pilots.** The first attempt used the paper's post-norm blocks, 400 warmup
# steps and a peak rate of 1.6e-3. After 4.9 minutes its validation BLEU was 1.8. The model wrote
# fluent English that had nothing to do with the German it was given. The second pilot used
# pre-norm blocks (chapter 2's `norm_first=True`) and a faster climb, 300 steps to 2.5e-3, and
# reached 10.9 in the same time. The explanation is chapter 2's. In a pre-norm block the
# residual path from each layer's output back to the input passes through no normalization. So
# early gradients reach the lower layers at full size, and large steps stay safe. We took
# pre-norm.
#
# **Run 1: the paper's regularization, equation 3 to the end.** Pre-norm at 2.5e-3, dropout 0.1,
# and a rate that only ever follows equation 3's $1/\sqrt{step}$ decay. After 60 minutes of
# training (3,195 steps) it scored 36.6 with beam search and 36.1 greedy on the test set.
# Validation BLEU passed 30 after 20 minutes. Then, for the whole second half hour, it jumped
# around between 32 and 35 without settling.
#
# **Run 2: a cooldown, and more dropout.** We suspected the rate, which stayed high to the end. Run
# 2 therefore brought the rate down in a straight line over the last ten of its 20 epochs (chapter
# 3's cooldown) and raised dropout to 0.2. The jumping stopped; the curve now rose to a plateau and
# stayed there. The test scores went up a little, to 37.0 with beam search (0.4 more) and 36.3
# greedy (0.2 more). The start was slower, as more dropout is bound to make it. But the best
# validation score of the bare weights did not move: 34.8 in both runs, equal to within 0.01.
#
# **What this showed.** The schedule was not what held the model back. The next suspect was the
# vocabulary, which holds the words seen at least twice in training. With it, 35% of the German
# test sentences contain at least one word the model reads as `<unk>`. Of the English references,
# 19% contain a word it has no way to write.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Subwords, tried (run 3)
#
# **Run 3.** Run 2 with the words replaced by 8,000 shared subwords (chapter 5's sentencepiece
# BPE), which leaves no `<unk>` at all. Because the vocabulary is shared, all three embedding
# matrices were shared too (the paper's section 3.4). Everything else stayed as in run 2. It
# learned far more slowly: after 10.3 minutes of training its validation BLEU was 3.4, where
# run 2 had 18.8 at the same point. We stopped it.
#
# **A closer look at the first 200 steps.** To see where the difference comes from, we trained
# three models for 200 steps from the same seed, with the same schedule and batches of the same
# size. The loss is compared in *nats per validation sentence*, the cross-entropy summed over each
# reference sentence. That total does not depend on how the sentence is cut into tokens, so words
# and subwords can be compared directly (lower is better):
#
# | vocabulary | weights shared | nats per validation sentence | BLEU (300 validation sentences) |
# |---|---|---|---|
# | words | target embedding and output layer | 55.9 | 1.2 |
# | 8,000 subwords | all three matrices | 69.8 | 0.5 |
# | 8,000 subwords | target embedding and output layer | 70.3 | 0.5 |
#
# Sharing all three matrices is not the culprit: without it the subwords did no better. Each
# subword step was also about 12% slower, because a sentence is more tokens long and the output
# layer is wider. We did not find out why subwords start so slowly here. Two explanations fit:
# the schedule was tuned on words, and a subword model must first learn to assemble words from
# pieces before it can translate them.
#
# **Run 3 for 14 epochs.** A slow start might still end well, so we let the subword recipe run
# for 14 epochs: 2,422 steps in 51 minutes. Its cooldown covered the last seven epochs, so that it
# finished inside the hour. It did not end well. Validation BLEU passed 30 only after 42
# minutes and peaked at 31.4. On the test set the averaged model scored 32.7 with beam search and
# 31.4 greedy, four to five points below run 2 (37.0 and 36.3). It was behind epoch for epoch as
# well: 31.2 after 14 epochs, against 32.1 for run 2 after its 14th. (Run 2's rate was still the
# higher of the two there, since its cooldown had six epochs left to run.)
#
# **What this showed.** For this corpus, this model size and this budget, words plus copying the
# source word for each `<unk>` (chapter 6) beat 8,000 subwords. Words became the default;
# `vocab_size=8000` builds the subword corpus again.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. Post-norm over the whole hour (run 4)
#
# The pilots had judged pre-norm after five minutes, and the budget is an hour. Run 4 kept run 2's
# words, dropout 0.2 and cooldown. It changed only the blocks, back to the paper's post-norm,
# and the rate, to a gentler 500 warmup steps and a peak of 1.0e-3 (`lr_factor=0.358`). Early on
# it was as slow as the pilot had predicted:
#
# | validation BLEU after | 8 minutes | 15 minutes | about 25 minutes |
# |---|---|---|---|
# | run 2 (pre-norm, 2.5e-3) | 18.1 | 23.0 | level |
# | run 4 (post-norm, 1.0e-3) | 5.5 | 18.0 | level |
#
# From then on run 4 stayed one to two points ahead, to the end:
#
# | | run 2 (pre-norm) | run 4 (post-norm) |
# |---|---|---|
# | best validation BLEU | 34.8 | 36.6 |
# | test, beam search | 37.0 | 38.2 |
# | test, greedy | 36.3 | 37.4 |
# | test, last weights | 34.5 | 36.0 |
#
# The largest gain is on the last weights, before any averaging or copying, so the improvement
# lies in the trained model itself. **What this showed:** over a fixed hour, a quick start is worth
# less than a better finish. The default went back to the paper's post-norm. `norm_first=True,
# warmup=300, lr_factor=0.7` restores the pre-norm runs.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Dropout, fixed and rising (runs 5, 6 and 7)
#
# Run 4 shared a flaw with every run before it. Over its last quarter hour the validation score
# stopped rising while the training loss kept falling: the model was memorising its 29,000
# training sentences rather than learning more about translation.
#
# **Run 5: more dropout, fixed.** Run 4 with a fixed 0.3 in place of 0.2. The extra dropout
# slowed learning so much that after 36 minutes its validation BLEU was 27.1, where run 4 had
# 33.4, and we stopped it. When it was later trained to the end, it never caught up: best
# validation 32.3, and 35.0 with beam search and 33.9 greedy on the test set.
#
# **Run 6: dropout that rises.** The idea is to use little dropout while the model is still
# underfitting, and more once it has seen the data often enough to start memorising it. Run 6 is
# run 4 with one change: dropout 0.1 at the first step, rising in a straight line to 0.2 halfway
# and 0.3 at the last step (chapter 3's `p_drop_final=0.3`). Runs 4 and 6 have the same steps
# and the same schedules, so they can be compared step by step. The step columns below are the
# ends of epochs 3, 6, 9, 12, 16 and 20:
#
# | after step | 456 | 912 | 1,368 | 1,824 | 2,432 | 3,040 | best |
# |---|---|---|---|---|---|---|---|
# | fixed 0.2 (fourth run) | 5.5 | 20.6 | 30.6 | 31.9 | 36.6 | 35.9 | 36.6 |
# | 0.1 rising to 0.3 (sixth run, first making) | 11.6 | 26.2 | 33.8 | 33.3 | 37.5 | 36.2 | 37.5 |
# | 0.1 rising to 0.4 (seventh run) | 10.8 | 26.8 | 33.3 | 33.6 | 36.7 | 35.9 | 36.7 |
#
# *(validation BLEU, greedy decoding, bare weights)*
#
# The low early dropout helps most at the start, which is what it was for: 11.6 against 5.5 after
# 456 steps, 26.2 against 20.6 after 912. By the end the gap is smaller. On the test set:
#
# | test2016 ($\alpha = 0.6$) | run 4 | run 6 | difference |
# |---|---|---|---|
# | beam search | 38.2 | 38.6 | +0.4 |
# | greedy | 37.4 | 38.4 | +1.0 |
# | last weights | 36.0 | 37.2 | +1.2 |
#
# On the validation set the averaged model with beam search went the other way, 38.7 for run 6
# against 38.9 for run 4. With one run each, differences of a few tenths prove nothing. The early
# lead of five to six points is another matter: it is far larger than the scatter between two
# evaluations.
#
# **Run 7: rising further.** If rising to 0.3 helps, does rising to 0.4 help more? Run 7 changed
# only the final rate. The two schedules differ little for most of the run, and for the first two
# thirds run 7 stayed within a point of run 6, as expected. At the end it was worse: best validation
# 36.7 against 37.5, and on the test set 37.1 with beam search, 36.7 greedy and 35.9 for the last
# weights. Those are 1.5, 1.7 and 1.3 points below run 6. (It trained for 56.5 minutes, on a day
# the machine was faster.) So the rate stops at 0.3: `p_drop=0.1, p_drop_final=0.3` is the
# default, and `p_drop=0.2, p_drop_final=None` goes back to a fixed rate.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Run 6, made twice and timed alone
#
# **The first making of run 6** (Intel Xeon) trained for 3,040 steps (20 epochs) in 65.7 minutes
# on two cores, about 2,080 target tokens per second. On the test set, with chapter 7's
# $\alpha = 2.5$, it scored 39.7 with beam search (38.6 with the paper's 0.6), 38.4 greedy, and
# 37.2 for the last weights alone. Validation BLEU passed 30 after 24 minutes and 35 after 38,
# and peaked at 37.5. The run was allowed 75 minutes, not the default 60, so that it could be
# compared with run 4 step for step. The 60-minute limit of that time simply stopped a run when
# the time was up; chapter 7's budget now plans the schedule instead. Under that limit the run
# would have stopped near step 2,740, where its validation BLEU was 36.8.
#
# The length penalty was chosen on that run's validation set. BLEU climbed with $\alpha$ from 38.3
# without a penalty through 38.7 at the paper's 0.6 to 39.6 at 2.5, where the outputs were as long
# as the references. It then stayed level: 4.0 tied with 2.5 while making the outputs longer than
# the references. So the recipe took 2.5.
#
# Those minutes were wrong by a factor of two. The machine was shared with other work while the
# run trained. The recipe was made again **alone** on an idle Xeon of the same kind, as the
# benchmark record of the time (`benchmarks/results/multi30k.json` as of commit 4eb2973, since
# re-made for the two-layer recipe). It reproduced every score to the last digit in 29.2 training
# minutes: validation BLEU 30 after 10.3 minutes and 35 after 16.7. Every recipe above was
# therefore judged on about half the compute an hour gives. The lesson is in
# `benchmarks/common.py`, which now records the load a timing ran under and refuses to let a busy
# machine's record replace a clean one.
#
# That falls short of the targets we had set for the recipe: 42 with beam search, 40 greedy, and a
# validation BLEU of 35 within 15 minutes. The notes also compare it with a plain post-norm
# baseline measured on the same machine (38.0 greedy after an hour, validation 35 after about 40
# minutes), which the recipe beat, but only narrowly. They do not say which run that baseline
# was. Its greedy score is not run 4's 37.4, so treat it as a loose reference.
#
# **The second making, on an AMD EPYC.** Until the search of section 7, chapter 7's notebook
# showed the same recipe made again from scratch on a two-core AMD EPYC. That CPU also has bf16
# instructions (AVX-512), so training again ran under bf16 autocast. It used the same seed, the same batches and the same
# 3,040 steps. The two processors add up bf16 products in different orders, so the two runs part
# ways in the last bits within their first steps. They end as two samples of one recipe:
#
# | | first making (Intel Xeon) | second making (AMD EPYC) |
# |---|---|---|
# | test2016, beam search ($\alpha = 2.5$) | 39.7 | 39.55 |
# | test2016, greedy | 38.4 | 38.07 |
# | test2016, last weights | 37.2 | 36.99 |
# | best validation BLEU | 37.5 | 37.44 |
# | validation BLEU 30 reached | after 24 minutes | at step 1,064 (epoch 7) |
# | validation BLEU 35 reached | after 38 minutes | at step 1,900 (epoch 12.5) |
#
# The second making's minutes are no timing at all: its machine was shared with other work and
# the run was even paused. Read its curves against steps. The test scores of the two makings
# differ by 0.15 to 0.33 points, with the seed and the data order held fixed. That is a floor
# under the noise in every comparison above. A new seed, which changes the initial weights and
# the order of the data as well, can be expected to move the scores further.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 7. The search for the hour (runs 8 to 11)
#
# Timed alone, run 6 left half the hour unused on the Xeon. It did not fit into the hour on a
# two-core AMD EPYC with AVX2 only (fp32, about 45 steps a minute: some 68 minutes for the 3,040 steps).
# There the hour's budget squeezed the recipe into 2,405 steps (chapter 7's planner), a weaker
# model. So
# the recipe had two jobs left: use the Xeon's spare half hour, and give the slower machine
# something that fits. Chapter 9's Table 3, measured over 700 steps, named the candidates: the
# variants that beat its base by more than the noise. We began with the two that cost nothing:
#
# * **Run 8: dropout from 0.** Run 6 with dropout starting at 0 instead of 0.1 (it still rises to
#   0.3 by the last step, since runs 4 to 6 found dropout paying late). Table 3: no dropout at all
#   gave the best beam BLEU and the lowest perplexity of every line measured then (the one-layer
#   line, added to the table later, beat it on both).
# * **Run 9: two layers a side** instead of three. Table 3: 3.9 BLEU above its base at 700 steps,
#   for 0.76 of the base's cost per step.
#
# Each is run 6 with that one change, the same seed, batches and 3,040 steps, scored as chapter 7
# scores its run (so with $\alpha = 2.5$, unlike the tables above). `make bench-recipes`
# (`benchmarks/bench_recipes.py`) trains such candidates and adds each to
# `benchmarks/results/recipes.json` as soon as it is scored. Runs 8 and 9 were trained side by
# side, one thread each, on the same kind of AMD EPYC as run 6's second making, which is the
# column they are compared with. Their minutes are no timings: compare steps.
#
# | | run 6 (three layers) | run 8: dropout from 0 | run 9: two layers |
# |---|---|---|---|
# | test2016, beam / greedy | 39.55 / 38.07 | 39.96 / 38.47 | 40.19 / 39.71 |
# | test2016, last weights alone | 36.99 | 37.42 | 38.94 |
# | validation, beam / greedy | 40.07 / 38.42 | 40.53 / 39.49 | 40.03 / 38.70 |
# | best validation BLEU (bare weights) | 37.44 | 38.32 | 37.76 |
# | validation BLEU 30 / 35 first at step | 1,064 / 1,900 | 912 / 1,368 | 912 / 1,444 |
#
# **What this showed.** Both changes learn faster. Run 9 was ahead of run 6 at nearly every
# evaluation of the first half of training, and run 8 at most of them. Both reached 35 sooner, run
# 9 by 456 steps and run 8 by 532 (about a sixth of the way). At the end both stand at or above
# run 6 on every line but one (run 9's validation beam score, 0.04 lower). Most of the differences
# are a few tenths, the size by which two makings of one recipe differ (section 6). The two runs
# do not even agree on where they gain: run 9's clear gains are on the test set (1.6 greedy, 2.0 from the last weights
# alone), run 8's on the validation set (0.5 to 1.1). One seed each cannot settle more than that.
#
# **What we took.** Two layers a side became chapter 7's recipe. It is at least as good as three,
# and it is cheaper, which decides the second job. Measured alone on the bf16 EPYC, a two-layer
# step costs 0.75 of a three-layer one (run 8's, 0.96: the same).
#
# **The AVX2 machine, played on this one.** No AVX2-only machine was at hand, but the EPYC can be
# held to the kernels such a machine runs. That means oneDNN, MKL and PyTorch's own kernels
# limited to AVX2, and fp32, since there is no bf16 (`benchmarks/bench_recipes.py --step-costs --as-avx2`, alone).
# So held, it made 51.9 of run 6's steps a minute, a little faster than the 45 the real AVX2
# machine averaged, and 67.4 two-layer steps: 0.77 of run 6's cost, as in bf16. The real
# AVX2 machine has since trained the two-layer recipe. Chapter 7's notebook, executed on a
# two-core AMD EPYC with AVX2 only with the cores to itself, took 50.8 training minutes for the
# 3,040 steps. It had chapter 7's fast step, which came after this search. That is inside the 54
# that the hour's budget plans (90% of it), with little to spare.
#
# **Run 10: the rest of the Xeon's hour.** On the Xeon the two-layer recipe should take about 22
# minutes, so the hour holds twice its steps. Run 10 is run 9 stretched: 40 epochs, 6,080 steps,
# the same warmup, the cooldown over the last 20 epochs and the dropout rising over all 40.
# **Run 11** is run 9 with run 8's change, dropout starting at 0. Both were trained and scored as
# above (run 10 mostly with two threads alone, run 11 in several sessions; the record lists them).
#
# | | run 9: two layers | run 10: 40 epochs | run 11: two layers, dropout from 0 |
# |---|---|---|---|
# | test2016, beam / greedy | 40.19 / 39.71 | 40.73 / 39.97 | 39.81 / 38.80 |
# | test2016, last weights alone | 38.94 | 39.58 | 38.21 |
# | validation, beam / greedy | 40.03 / 38.70 | 40.59 / 39.38 | 38.97 / 38.44 |
# | best validation BLEU (bare weights) | 37.76 | 39.04 | 37.93 |
# | validation BLEU 30 / 35 first at step | 912 / 1,444 | 912 / 1,368 | 760 / 1,064 |
#
# **What this showed.** Twice the steps bought a quarter to two thirds of a point on every final
# score, less than the first 3,040 steps suggested. Run 10's validation BLEU touched 39.0 at step
# 2,812, with its learning rate still high, and spent the cooldown between 36.7 and 38.7, mostly
# near 38, ending at 38.35. Its earlier 35 (step 1,368 against 1,444) is the dropout: rising over 40
# epochs instead of 20, it was lower at that point. Run 11 learned fastest of every run in this
# notebook: validation 35 at step 1,064, 380 steps before run 9. It ended below run 9 on every
# final score: 0.4 with beam search and 0.9 greedy on test2016, 1.1 with beam search on validation.
# Run 9 was made a second time as chapter 7's benchmark record. That making had the same seed and
# batches, but two threads instead of one, the Xeon with AMX instead of the EPYC, and chapter 7's
# fast step, which adds the same numbers in another order. It differs from run 9 by up to
# 0.5 on the test set and 0.3 on validation. So this is one seed's word, not a verdict, and it does
# not invite a second look before other ideas.
#
# **What we took from runs 10 and 11.** Run 10 became chapter 7's `long` profile, for CPUs that
# have the time. We estimated about 44 minutes on the Xeon. Trained there later, alone, it took
# 52.2, and scored 40.61 / 39.50 against 40.51 / 39.63 for the full profile on the same machine
# (one run each). So the gain of run 10 over run 9 did not come back, and is best read as noise
# until several seeds say otherwise. It does not fit the other two machines' hours: on the bf16
# EPYC its 6,080 steps took 62 minutes, and on the AVX2 machine the budget would compress it to
# about the full profile's length. So the default stays the full profile, which fits all three.
# Dropout from 0 stays out: it sped the start, not the finish.
#
# **Still short of the targets.** We had set 42 with beam search and 40 greedy on test2016: the
# best line of the search has 40.7 and 40.0 (39.97). Neither more steps nor the changes Table 3
# picked at 700 steps closed a gap of over a point with beam search; section 8 lists what we
# would try next.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 8. What a reader could try next
#
# * **Several seeds per recipe.** This is what the notebook lacks most. Three seeds each for runs 4
#   and 6 (`seed` in `RunConfig`) would show whether the test gains of section 5, 0.4 to 1.2 points,
#   hold up, or shrink into the scatter that section 6 measured.
# * **Regularizers that act differently.** The last quarter hour still adds little, and a higher
#   final dropout rate (run 7) made things worse, so more of the same is not the answer. Candidates
#   are dropout on the attention weights, dropout inside the feed-forward layer between its two
#   linear maps, dropping whole source words, and weight decay.
# * **Subwords on their own schedule.** Run 3 gave subwords a pre-norm schedule tuned for words.
#   Post-norm with a warmup and peak rate chosen for subwords, and smaller vocabularies than
#   8,000, are untested. They would also remove the `<unk>` ceiling of section 2.
# * **The rest of Table 3.** Chapter 9 measured Table 3's rows on Multi30k, each for 700 steps
#   around a pre-norm base with three seeds. Of the variants that beat its base beyond the noise
#   band, section 7 ran two (two layers, no dropout at the start). The others are still worth a
#   full run against chapter 7's recipe with the same seed: one layer a side, a smaller
#   feed-forward layer, a wider model and learned positions. One layer a side was the table's
#   best line at 700 steps, but its lead may not survive a full run's twenty epochs, where
#   capacity has time to pay. A `make bench-recipes` candidate is one line of
#   `benchmarks/bench_recipes.py`. Learned positions with two layers is already one, begun but
#   not finished.
#
# To start from any run above, change chapter 7's full profile. Set the decoding to the paper's
# $\alpha$ to compare with this appendix, and lift the time limit so that a slow machine still
# runs all the steps:
#
# ```python
# from dataclasses import replace
#
# from annotated.ch06_decoding import DecodeConfig
# from annotated.ch07_multi30k import PROFILES, train_multi30k
# from annotated.training.config import RUNS_DIR
#
# run6 = replace(PROFILES["full"], N=3, max_minutes=None, decoding=DecodeConfig(beam=4, alpha=0.6))
# run4 = replace(run6, p_drop=0.2, p_drop_final=None)
# run2 = replace(run4, norm_first=True, warmup=300, lr_factor=0.7)
# run3 = replace(run2, vocab_size=8000)
# train_multi30k(replace(run6, seed=1), RUNS_DIR / "lab-run6-seed1")  # an hour of training
# ```
#
# `RUNS_DIR` is the book's folder for runs, the one chapter 7 trains in; a relative path such as
# `"runs/lab-run6-seed1"` would instead land beside wherever the code runs (from this notebook, in
# `notebooks/runs/`).
#
# These re-make the recipes with today's code, not the original runs bit for bit. The code may
# differ in small ways from the code of the time, and the machine will differ, so expect scores
# near those above, not equal to them.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **A.1 Predict.** Runs 4 and 6 differ only in their dropout schedule. Before reading the table of
# section 5, predict where the rising schedule's advantage is largest: early, in the middle, or
# at the end of training. Then check.
#
# <details><summary>Answer</summary>
#
# Early: at the start the rising schedule uses 0.1 where the fixed one uses 0.2, and a model that
# underfits gains most from less dropout. The table shows the largest gap at step 456 (11.6 against
# 5.5) and a much smaller one at the end.
#
# </details>
#
# **A.2 Discuss.** Each recipe here was run once. What is the smallest experiment that would tell
# whether run 6's 0.4 BLEU over run 4 on the test set is more than seed-to-seed noise?
#
# <details><summary>One answer</summary>
#
# Train both recipes with three or more seeds each (different initialization and batch order, the
# same data) and compare the two groups: the difference matters when it is larger than the spread
# within each group. The two makings of run 6 on two machines (section 6) already differ by 0.15
# to 0.33, a first hint of the noise.
#
# </details>
#
# **A.3 Modify.** Pick one idea of section 8 and run it with the `class` profile of chapter 7 (about
# 10 minutes a run on two cores), against the unchanged `class` profile with the same seed. Report
# the validation BLEU of both at every epoch, and say whether the difference could be noise.
#
# <details><summary>What to hand in</summary>
#
# A table of validation BLEU per epoch for both runs, the final test scores, and one sentence on
# whether the difference is larger than the noise you would expect from A.2.
#
# </details>
