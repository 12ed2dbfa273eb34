"""The training recipes offered as settings: weight EMA, MixUp/CutMix, learning-rate schedules, staged
fits, and the learning-rate finder. docs/ARCHITECTURE.md maps train/'s rooms."""
