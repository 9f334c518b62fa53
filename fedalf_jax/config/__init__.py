"""The configuration: ``fj.Config`` (every option of a run, validated up front in one line), the options' values, and a run's identity (what makes two configurations one run)."""
