// @ts-check
/**
 * Theme choice: TensorBoard's dark mode (its document body has class `dark-mode`) wins when
 * it can be read; otherwise the system preference. Pure decision; the DOM layer gathers
 * the inputs.
 * @param {{parentDark: boolean | null, prefersDark: boolean, override?: string | null}} input
 *   parentDark: null when the parent document cannot be read (cross-origin, not framed)
 * @returns {"light" | "dark"}
 */
export function chooseTheme(input) {
  if (input.override === "dark" || input.override === "light") return input.override;
  if (input.parentDark !== null) return input.parentDark ? "dark" : "light";
  return input.prefersDark ? "dark" : "light";
}
