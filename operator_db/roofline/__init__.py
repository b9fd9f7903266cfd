"""The roofline: bounds and roofs, chip spec sheets and kind peaks, counters, tables and plots."""
