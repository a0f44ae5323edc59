# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 10 — Conclusion
#
# *Paper: section 7 (Conclusion), with Tables 1 and 2 as the evidence it rests on.*
#
# The paper closes in one short paragraph: what was built, what it achieved, and where the authors
# meant to take it. This chapter does the same for the book. It first goes back over what each
# chapter built. Then it takes the paper's closing claims one by one. For each it says whether the
# book checked it for itself, only at a smaller scale, or not at all. It ends with next steps for
# a reader who wants to go further.

# %% tags=["active-ipynb", "hide-input"]
# # Run this cell first: it finds the book's code, or installs the release this notebook ran with.
# def find_or_install_the_book(name="annotated-transformer-book", version="0.1.0"):
#     import subprocess, sys, tempfile
#     from importlib import invalidate_caches, metadata
#
#     try:
#         found = metadata.version(name)
#     except metadata.PackageNotFoundError:
#         # Pins what this kernel has imported already (numpy...): pip must not replace any of it.
#         imported = metadata.packages_distributions()
#         kept = {d for module, ds in imported.items() if module in sys.modules for d in ds}
#         with tempfile.TemporaryDirectory() as folder:
#             pins = f"{folder}/imported.txt"
#             with open(pins, "w") as file:
#                 file.writelines(f"{d}=={metadata.version(d)}\n" for d in sorted(kept))
#             pip = [sys.executable, "-m", "pip", "install", f"{name}=={version}", "-c", pins]
#             result = subprocess.run(pip, capture_output=True, text=True)
#         if result.returncode != 0:
#             print(result.stdout + result.stderr)
#             print(f"Could not install the book's code, {name}=={version} (pip's words above):"
#                   " that release may not be on the package index yet, or this machine is offline.")
#             print("Work in a clone of the book instead (`make lab` there opens the chapters), or"
#                   " install a clone here (`pip install -e path/to/clone`) and restart the kernel.")
#             raise RuntimeError(f"{name} is not installed") from None
#         invalidate_caches()
#         found = metadata.version(name)
#     note = "" if found == version else f" (this notebook was executed with {version})"
#     print(f"The book's code: {name} {found}{note}.")
#
#
# find_or_install_the_book()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What the book built
#
# * **Chapter 0, Preface (§1, §2, §4, Table 1).** It made the case of those sections by counting.
#   PyTorch's own counters showed a recurrent layer needing $n + 1$ matrix products one after
#   another, while self-attention needs 2 whatever the length. The arithmetic of the two layers
#   crosses at $n = d$. You can now read Table 1 as operations you have counted yourself.
# * **Chapter 1, Attention (§3.2).** Equation 1 written out, then checked on a case small enough to
#   work by hand. The $\sqrt{d_k}$ was measured rather than taken on trust, and masks kept
#   positions from seeing padding or the future. Multi-head attention matched PyTorch's own module.
# * **Chapter 2, The model (§3.1, §3.3–3.5, Table 3).** Every box of Figure 1, assembled by
#   `make_model`, with sinusoidal positions, shared embeddings, and parameter counts set beside
#   Table 3's. It also added a pre-norm option next to the paper's post-norm, and compared the
#   gradients of the two.
# * **Chapter 3, Training (§5).** Batches with teacher forcing and their masks, and Adam with the
#   schedule of equation 3 (plus an optional linear cooldown). Label smoothing, checked against
#   PyTorch's loss. Dropout, including a rate that rises during training and a cheaper
#   `FastDropout`. Around these sits a training loop with bf16 autocast and checkpoints that
#   survive a killed process.
# * **Chapter 4, Copy task.** A first model trained end to end on a task with a known answer, plus
#   greedy decoding. It copied sequences it had never seen, with its attention running along the
#   diagonal. That is evidence that the masks, the shifted targets and the schedule fit together.
# * **Chapter 5, From text to batches (§5.1).** Multi30k, checked against its checksums and cut
#   into words by spaCy. Word vocabularies learned from the training split only, with `<unk>` for
#   the rest, and a shared sentencepiece BPE vocabulary. Batches packed to a token budget.
# * **Chapter 6, Decoding and scoring (§6.1).** A key/value cache, greedy decoding that uses it,
#   and beam search with the length penalty. A `Translator` that copies a source word where the
#   model writes `<unk>`. Scores from sacreBLEU and chrF, with their signatures. It also added the
#   tokenized BLEU of tensor2tensor's `get_ende_bleu.sh`, which is how the paper's numbers were
#   computed.
# * **Chapter 7, Multi30k (§3.2, §5.2–5.4, §6.1).** The parts of chapters 1 to 6 put together: a
#   German→English translator, trained on two CPU cores within an hour's budget. Its notebook's
#   model has $N = 2$ layers a side and a width of $d_{model} = 256$. It trained for 3,040 steps,
#   and its last checkpoints were averaged. It then scored 40.06 BLEU with beam search and 39.55
#   greedy on test2016, Multi30k's test set.
# * **Chapter 8, WMT 2014 (§3.4, §5, §6.1, Tables 2–3).** The paper's recipe from start to finish,
#   on a 10,000-pair sample. Its notebook trained for 436 steps on two CPU cores, in 17.7 training
#   minutes. The averaged model then scored 0.17 sacreBLEU on newstest2014 with beam search. That
#   shows the pipeline works; it is not a result. The same code trains on the full data on GPUs
#   under `torchrun`. With dropout off, data-parallel training (DDP) was checked to take the same
#   steps as one process.
# * **Chapter 9, Table 3 at Multi30k scale (§6.2, Table 3).** Every line of the paper's model
#   variations, trained on Multi30k under one budget of 700 steps. The base is pre-norm, with three
#   layers a side, a width of 256 and eight heads, and it was trained with three seeds. The seeds
#   alone moved beam BLEU by about one point either way (19.6 ± 1.1), and chapter 9's noise band
#   is twice that. So at this budget only large effects can be told from chance. The table after
#   this list sets them beside the paper.
# * **Appendix A, Lab notebook.** The runs that led to chapter 7's recipe, each with what it
#   showed.
#
# Chapter 9's large effects, in validation BLEU with beam search:
#
# | line of Table 3 | our BLEU | against the paper |
# |---|---|---|
# | one head | 9.8 | agrees: a starved model loses |
# | $d_{model} = 128$ | 11.4 | agrees: a starved model loses |
# | a wider model, $d_{model} = 512$ | 23.1 | agrees in perplexity, 18% lower (the paper's BLEU barely moved); a step costs 2.22 times the base's |
# | one layer a side | 28.5 | disagrees: the best line |
# | two layers a side | 23.5 | disagrees |
# | no dropout | 24.0 | disagrees |
# | $d_{ff} = 512$ | 22.1 | disagrees, but only just past the band: a hint |
# | learned positions | 23.1 | disagrees: past the band, but one seed of one line, so a hint |
#
# Four of the lines that disagree (one or two layers a side, no dropout, a smaller feed-forward
# layer) make the model smaller or less regularized. They lose in the paper's 100,000 steps, yet
# beat the base in our 700, where learning fast is what counts. The paper found learned positions
# about as good as sinusoids; ours beat the sinusoidal base, and chapter 9 gives a plausible
# reason.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## The paper's claims, and what this book could check
#
# Section 7 makes six points. Each is restated below in our words, with what the book has to say
# about it.
#
# | the paper's claim (section 7) | what this book showed | what it could not show |
# |---|---|---|
# | the first sequence transduction model that uses attention alone, with no recurrence or convolution | every model in the book is built this way, from chapter 1's attention and chapter 2's feed-forward layers, and it learns to copy (chapter 4) and to translate (chapters 7 and 8) | nothing essential: this claim is about the architecture, and all of it is in the code. Whether it was the first is a matter of history, which code cannot check |
# | for translation it trains much faster than recurrent or convolutional models | chapter 0 counted the reason: a constant number of sequential steps per layer, and less arithmetic than a recurrent layer whenever $n < d$; Table 2 (below) puts the base model's training cost below every model it compares with | we never trained a recurrent or convolutional translator next to ours, so the book has no timing of its own for this claim, and two CPU cores offer little parallelism to exploit |
# | a new state of the art on WMT 2014 English→German (28.4, big model) and English→French (41.8) | translation quality, but only at Multi30k's scale and in the opposite direction, German→English: 40.06 BLEU on test2016 (chapter 7) | short image captions are far easier than news, so the score cannot be set beside Table 2. The WMT En-De recipe ran only on a 10,000-pair sample (0.17 sacreBLEU in chapter 8); the full run is a command in chapter 8 that the book did not run. En-Fr (36M sentence pairs) was not attempted |
# | the authors meant to apply it to other tasks and to inputs and outputs other than text | nothing beyond translation and the copy task | the paper's own test beyond translation, English constituency parsing (section 6.3, Table 4), was not reproduced; images, audio and video, which its conclusion names as future work, were not tried either |
# | local, restricted attention to handle large inputs and outputs | Table 1's last row, printed in chapter 0: cost $O(r \cdot n \cdot d)$, path length $O(n/r)$ | not implemented. Our sentences are short ($n < d$), so full attention was the cheaper choice anyway |
# | generation that is less sequential | chapter 6's cache brings each decoding step down to one position of work | the number of steps is still the length of the output, one token at a time; the book kept the paper's autoregressive decoder |
#
# Table 2 is where the second and third claims are argued. Chapter 8 typed in its rows, and here
# it is again. Its last column is each model's English→German training cost divided by that of
# the base Transformer.


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# from annotated.ch08_wmt import table_2
#
# table_2()

# %% [markdown]
# Among the single models, the base Transformer costs about a third as much to train as ConvS2S
# (3.3e18 against 9.6e18 FLOPs) and about a seventh as much as GNMT + RL, yet it scores higher on
# English→German. The big model costs the same as GNMT + RL and beats the best ensemble (26.36)
# by about two points. On English→French the base model (38.1) stays below the earlier systems.
# Only the big model (41.8) passes them. Table 2 gives each Transformer one training cost for
# both tasks: its cell spans the two columns, and chapter 8's table shows it under both. Section
# 6.1 adds that the big model reached its English→French score at less than a quarter of the
# training cost of the previous state of the art. These costs are the paper's own estimates, in
# floating-point operations rather than hours, and the book could not repeat the comparison. What
# chapter 0 adds is the reason behind them, and that reason does not depend on the hardware.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Where to go next
#
# **Run what the book could not.**
#
# * *WMT 2014 at full size.* On a machine with eight GPUs, chapter 8's command trains the base
#   model on all 4.5 million pairs:
#   `torchrun --standalone --nproc_per_node=8 -m annotated.train wmt --profile base`.
#   Replace `--profile base` with `--profile big` for the big model. Score it with chapter 6's
#   tokenized BLEU to compare with the 27.3 of Table 2, and with sacreBLEU to compare with later
#   papers.
# * *Vocabularies for Multi30k.* Chapter 5 builds both word vocabularies and shared subwords, and
#   `RunConfig.vocab_size` chooses between them. Words set a ceiling, since a word missing from
#   the vocabulary can only come out as `<unk>`; subwords remove it. In the lab notebook, 8,000
#   shared subwords on a schedule tuned for words learned more slowly than words did. Other
#   vocabulary sizes, each with a warmup and peak rate chosen for it, are a project of their own.
# * *Table 3 at a longer budget.* Chapter 9 measured every line for 700 steps. Regularization
#   (row D) is the row most likely to change with more training. Its exercise 9.3 sets up the
#   same comparison at three times the steps, and the plan can be stretched further in the same
#   way. More seeds per line would narrow the noise band.
# * *Restricted attention.* A band mask, built the way chapter 1 builds its masks, lets each
#   position see only its $r$ neighbours. Count its operations on long inputs the way chapter 0
#   did, and set them beside Table 1's last row.
#
# **Later changes to the architecture.** Pre-norm (chapter 2's `norm_first=True`) is now the usual
# arrangement, because deep stacks train stably with it. In our hour it started faster and finished
# lower (appendix A). Xiong et al. (2020) analyse why pre-norm can often do with little or no
# warmup. Later models also replaced the sinusoids, with relative position representations (Shaw
# et al., 2018) or rotary embeddings (Su et al., 2021). Many use RMSNorm in place of layer
# normalization (Zhang and Sennrich, 2019), and gated feed-forward layers such as SwiGLU (Shazeer,
# 2020). Each is a change at one place in chapter 1 or 2, and can be tested there.
#
# **Further reading: what came after.**
#
# * **GPT** (Radford et al., 2018), then GPT-2 and GPT-3: only the decoder stack, trained to
#   predict the next token of large amounts of text. Scaled up, it learned to do tasks from a
#   prompt alone.
# * **BERT** (Devlin et al., 2018): only the encoder stack, pre-trained to fill in words masked
#   out of unlabelled text, then fine-tuned for each task.
# * **T5** (Raffel et al., 2020): the full encoder-decoder kept, with every task cast as text in
#   and text out, plus a careful comparison of pre-training choices.
# * **Image Transformer** (Parmar et al., 2018) and **Music Transformer** (Huang et al., 2018):
#   early steps, with some of the paper's authors, toward the other modalities that section 7
#   announced. The first restricts attention to local neighbourhoods of pixels.
# * **Vision Transformer** (Dosovitskiy et al., 2020): an image cut into patches and read as a
#   sequence by a plain Transformer encoder.
# * **Sparse Transformer** (Child et al., 2019) and **Longformer** (Beltagy et al., 2020):
#   attention restricted to fixed patterns, so that very long inputs stay affordable.
# * **Non-autoregressive translation** (Gu et al., 2018): the whole output produced in parallel,
#   an answer to the last point of section 7.
#
# Each of these changes one part of what chapters 1–3 built: which stack is kept, what it is
# trained to predict, or which positions attend to which. A reader who has built those parts can
# read any of these papers with the code at hand.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **10.1 Predict.** Table 2 gives training costs in floating-point operations. Using chapter 0's
# counts, roughly how would the base model's cost change if every training sentence were twice as
# long, with the same number of sentences?
#
# <details><summary>Answer</summary>
#
# A little more than twice. Most of the arithmetic is in the projections and the feed-forward
# layers, which grow linearly with the number of tokens. Only the attention scores grow with the
# square of the length, and for sentences much shorter than $d_\text{model}$ they are a small share.
#
# </details>
#
# **10.2 Discuss.** Which claim of section 7 would you test first with a week of one GPU, and what
# would you measure? Write down the experiment before you look at the lab notebook for ideas.
#
# <details><summary>One answer</summary>
#
# The speed claim, side by side. Train a recurrent encoder-decoder and the base Transformer on the
# same data, batches and hardware, and plot validation BLEU against GPU hours. The paper compares
# costs estimated from other papers; a measured comparison on one machine is what it leaves open.
#
# </details>
#
# **10.3 Modify.** Restricted attention (Table 1's last row) lets each position attend only to a
# neighbourhood of size $r$ around it. Here, for simplicity, take the $r$ positions on either side:
# a window of $2r + 1$, which is Table 1's $r$ doubled. Build it as a band mask from chapter 1's
# masks. Apply it to the encoder's and the decoder's **self-attention**; in the decoder, combine
# it with the subsequent mask, so that position $i$ sees positions $i - r$ to $i$. Train the copy
# task with $r = 1$ and $r = 3$: does each still copy? Then apply the band to the
# **encoder-decoder attention** as well (output position $i$ sees source positions $i - r$ to
# $i + r$), and predict again. Which task would a narrow band break?
#
# *A hint for the second part.* Chapter 2's `EncoderDecoder` hands the encoder's mask on to the
# encoder-decoder attention, so a band in the source mask reaches both. Give the memory a mask of
# its own, in a subclass whose `decode` takes it. Build the batches' masks yourself rather than
# through `Batch`, and decode with the same masks.
#
# <details><summary>Answer</summary>
#
# Both still copy, in both settings. Copying needs output position $i$ to reach source position
# $i$, and nothing else. With the band on self-attention only, the encoder-decoder attention is
# unrestricted and reaches it. With the band on the encoder-decoder attention too, source position
# $i$ is inside the band for any $r \ge 0$, because the task is local. A narrow band on the
# encoder-decoder attention breaks a task that moves information far, such as reversing a
# sequence. There output position $i$ needs source position $n - 1 - i$, outside the band for most
# $i$.
#
# </details>
