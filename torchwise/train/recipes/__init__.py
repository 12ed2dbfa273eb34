"""The training recipes offered as settings: EMA, MixUp/CutMix, schedules, staged fits, and the learning-rate finder."""
